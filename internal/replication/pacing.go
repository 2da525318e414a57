package replication

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/store"
)

// Pacing: the master sends a replica at most MaxInFlightBytes beyond what
// the replica acknowledged receiving (its acks' written end), so a replica
// far behind (a new one, or one back after a long absence) catches up at
// the pace it writes: the master holds one chunk per replica, the
// replica one frame, and the master's reads of old segments, which come
// from the disk, go no faster than the replica takes them. A link that
// delivers nothing for the idle timeout is dropped as before (the ack
// reader's deadline), so a stalled replica never holds a sender forever.

// DefaultMaxInFlightBytes is MasterConfig.MaxInFlightBytes's default.
const DefaultMaxInFlightBytes = 4 << 20

// pace is a follower's flow control.
type pace struct {
	recv     atomic.Int64  // what the replica acknowledged receiving
	maxAhead atomic.Int64  // the most ever sent beyond recv (tests check the bound)
	kick     chan struct{} // an ack arrived
	last     atomic.Int64  // end of the bytes sent
	// next is when the rate limit lets the next old range go (stream
	// goroutine only).
	next time.Time
}

func (p *pace) init(from int64) {
	p.recv.Store(from)
	p.last.Store(from)
	p.kick = make(chan struct{}, 1)
}

// received notes an ack of the replica's written end.
func (p *pace) received(written int64) {
	for {
		cur := p.recv.Load()
		if written <= cur || p.recv.CompareAndSwap(cur, written) {
			break
		}
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// sent notes bytes sent up to end.
func (p *pace) sent(end int64) {
	p.last.Store(end)
	if ahead := end - p.recv.Load(); ahead > p.maxAhead.Load() {
		p.maxAhead.Store(ahead)
	}
}

// inFlight is what was sent and not acknowledged as received.
func (p *pace) inFlight() int64 { return p.last.Load() - p.recv.Load() }

// waitCredit waits until f may be sent another chunk: at most
// MaxInFlightBytes minus a chunk are in flight, so a chunk never takes it
// past the bound (a record larger than a chunk, sent whole, can; nothing
// in flight always may send). It returns false after a heartbeat
// interval without room: the caller sends a heartbeat, then asks again.
func (m *Master) waitCredit(ctx context.Context, f *follower) (bool, error) {
	limit := int64(m.cfg.MaxInFlightBytes - m.cfg.ChunkBytes)
	var timeout <-chan time.Time
	for {
		if n := f.pace.inFlight(); n <= 0 || n <= limit {
			return true, nil
		}
		if timeout == nil {
			t := time.NewTimer(m.cfg.HeartbeatInterval)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-f.pace.kick:
		case <-timeout:
			return false, nil
		}
	}
}

// behind reports whether a replica reading at pos is catching up: more
// than MaxInFlightBytes behind the log end.
func (m *Master) behind(pos int64) bool {
	return m.cfg.Store.Offset(store.Written)-pos > int64(m.cfg.MaxInFlightBytes)
}

// waitRate waits until the catch-up rate limit lets a range at pos go. It
// returns false after a heartbeat interval of waiting: the caller sends a
// heartbeat, then asks again.
func (m *Master) waitRate(ctx context.Context, f *follower, pos int64) (bool, error) {
	if m.cfg.CatchUpBytesPerSecond <= 0 || !m.behind(pos) {
		return true, nil
	}
	wait := time.Until(f.pace.next)
	if wait <= 0 {
		return true, nil
	}
	t := time.NewTimer(min(wait, m.cfg.HeartbeatInterval))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
	}
	return wait <= m.cfg.HeartbeatInterval, nil
}

// charge counts a range [from, to) sent while catching up against the
// rate limit.
func (m *Master) charge(f *follower, from, to int64) {
	if m.cfg.CatchUpBytesPerSecond <= 0 || to <= from || !m.behind(from) {
		return
	}
	now := time.Now()
	if f.pace.next.Before(now) {
		f.pace.next = now
	}
	f.pace.next = f.pace.next.Add(time.Duration(float64(to-from) / float64(m.cfg.CatchUpBytesPerSecond) * float64(time.Second)))
}
