package schedule

import (
	"errors"
	"math"
	"time"

	"github.com/keelmq/keel/internal/store"
)

// confirmer is implemented by stores whose puts can be written and yet not
// confirmed (a SYNC_MASTER's replicas did not acknowledge in time: the put
// answers FLUSH_SLAVE_TIMEOUT; or the local fdatasync was late:
// FLUSH_DISK_TIMEOUT). *store.Store implements it.
type confirmer interface {
	Offset(w store.Watermark) int64
	Notify(w store.Watermark, off int64, timeout time.Duration, fn func(error))
}

// errUnconfirmed is flushBatch's answer for a batch that the store wrote
// but did not confirm in time. The batch must not be put again (that would
// deliver it twice); the queue waits until the store's Confirmed watermark
// passes it.
var errUnconfirmed = errors.New("schedule: delivery written, not yet confirmed")

// unconfirmed records that the batch just put on q (the cursor was before
// at cursor) is written up to the store's current log end but not
// confirmed. It returns false if the store cannot say when it is (the
// caller then treats the put as failed).
func (s *Service) unconfirmed(q *queue, cursor int64) bool {
	c, ok := s.st.(confirmer)
	if !ok {
		return false
	}
	if q.waitEnd == 0 {
		q.held = cursor
	}
	// The log end after the put covers the batch (and perhaps later
	// records of other writers: waiting for those too costs only time).
	end := c.Offset(store.Written)
	q.waitEnd = max(q.waitEnd, end)
	c.Notify(store.Confirmed, end, 0, func(error) { s.kick() })
	return true
}

// waitConfirmed reports whether q's unconfirmed deliveries are confirmed
// now (clearing the wait), or when to look again.
func (s *Service) waitConfirmed(q *queue, now int64) (int64, bool) {
	if q.waitEnd == 0 {
		return math.MaxInt64, true
	}
	c := s.st.(confirmer)
	if c.Offset(store.Confirmed) >= q.waitEnd {
		q.waitEnd, q.held = 0, 0
		return math.MaxInt64, true
	}
	// Notify kicks the service when it is; this bounds a lost kick.
	return now + s.cfg.RetryInterval.Milliseconds(), false
}

// savable is the cursor of q that may be written: never past a delivery
// the store has not confirmed (the cursor travels to the slaves as a
// system record; a slave that took over must deliver it again rather
// than miss it).
func (q *queue) savable() int64 {
	if q.waitEnd != 0 {
		return q.held
	}
	return q.cursor
}
