package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/store/watermark"
)

// Watermark names one of the store's CommitLog offsets. Each is the
// exclusive end of the bytes that have reached a stage; all only move
// forward, and Written >= Flushed >= Replicated always, Replicated =
// Confirmed >= Visible under SYNC_FLUSH, Written = Confirmed >= Visible
// under ASYNC_FLUSH (where Flushed may lag Visible: visibility does not
// wait for the disk). With ExternalReplication, Confirmed is Replicated in
// both modes, and under ASYNC_FLUSH Replicated is bounded by Written, not
// Flushed (a synchronous master over ASYNC_FLUSH waits for the replicas,
// not for its disk). Confirmed >= Visible holds across a restart too: a
// replica's and a synchronous master's recovery dispatch only what they
// had shown (replicaShownBefore, recovery.go), and the recovered tail
// after it waits for the replication service to confirm it.
type Watermark int

// The watermarks. See the package documentation ("Watermarks").
const (
	// Written: appended to the CommitLog (in the page cache).
	Written Watermark = iota + 1
	// Flushed: durable on the local disk (an fdatasync covered it).
	Flushed
	// Replicated: durable on every replica the replication mode requires
	// (and locally). Without replication, or with Config.ExternalReplication
	// unset, it is Flushed itself.
	Replicated
	// Confirmed: what a put waits for before it is acknowledged, and what
	// dispatch (hence Visible) never passes: Replicated under SYNC_FLUSH,
	// Written under ASYNC_FLUSH. It is one of the three above, not a stage
	// of its own.
	Confirmed
	// Visible: dispatched; every record below it has its ConsumeQueue and
	// index entries, so readers find it.
	Visible
)

func (w Watermark) String() string {
	switch w {
	case Written:
		return "written"
	case Flushed:
		return "flushed"
	case Replicated:
		return "replicated"
	case Confirmed:
		return "confirmed"
	case Visible:
		return "visible"
	}
	return fmt.Sprintf("Watermark(%d)", int(w))
}

// marks is the store's part of the watermarks (Written and Flushed are
// the CommitLog's).
type marks struct {
	replicated *watermark.Mark // the CommitLog's Flushed unless ExternalReplication
	confirmed  *watermark.Mark // Written or replicated, by the flush mode
	visible    *watermark.Mark
	// With ExternalReplication: the offset the replication service last
	// reported durable on the required replicas.
	reported atomic.Int64

	subMu sync.Mutex // serializes changes of subs
	subs  atomic.Pointer[[]*visibleSub]
}

// initMarks sets up the watermarks once the CommitLog is open.
func (s *Store) initMarks() {
	s.marks.replicated = s.log.Flushed()
	if s.externalReplicated() {
		s.marks.replicated = watermark.New("replicated", s.log.RequestFlush)
	}
	s.marks.confirmed = s.log.Written()
	if s.cfg.FlushDiskType == SyncFlush || s.externalReplicated() {
		s.marks.confirmed = s.marks.replicated
	}
	s.marks.visible = watermark.New("visible", nil)
}

func (s *Store) mark(w Watermark) *watermark.Mark {
	switch w {
	case Written:
		return s.log.Written()
	case Flushed:
		return s.log.Flushed()
	case Replicated:
		return s.marks.replicated
	case Confirmed:
		return s.marks.confirmed
	case Visible:
		return s.marks.visible
	}
	panic(fmt.Sprintf("store: unknown watermark %d", int(w)))
}

// Offset returns the offset of watermark w.
func (s *Store) Offset(w Watermark) int64 { return s.mark(w).Load() }

// VisibleOffset returns the highest CommitLog offset visible to readers:
// everything below it is dispatched (Offset(Visible)).
func (s *Store) VisibleOffset() int64 { return s.marks.visible.Load() }

// WaitFor blocks until watermark w reaches off (Offset(w) >= off), the
// store fails (an error wrapping ErrReadOnly's cause, commitlog.ErrFailed
// for the CommitLog's), timeout passes (if > 0; the error wraps
// watermark.ErrTimeout), the store closes, or ctx ends. Waiting on
// Flushed, Replicated or Confirmed asks for a flush.
func (s *Store) WaitFor(ctx context.Context, w Watermark, off int64, timeout time.Duration) error {
	return s.mark(w).Wait(ctx, off, timeout)
}

// Notify is WaitFor's callback form, costing no goroutine: fn is called
// exactly once with what WaitFor would return. It runs at once on the
// caller's goroutine when the outcome is known, otherwise on the goroutine
// that moves w (Written: the writer, holding the store's append lock;
// Flushed and, without ExternalReplication, Replicated: the CommitLog's
// acknowledger; Visible and an external Replicated: the dispatcher, with
// no store lock held, or for an external Replicated also the replication
// service's goroutine that calls ReleaseReplicated and, on a synchronous
// master, the acknowledger after a flush) or on a timer's. fn must not block, and a callback
// on Written must not put.
func (s *Store) Notify(w Watermark, off int64, timeout time.Duration, fn func(error)) {
	s.mark(w).Notify(off, timeout, fn)
}

// AdvanceReplicated tells the store that the CommitLog is durable on the
// required replicas up to off (on a replica: that its master confirmed
// up to off). Only with Config.ExternalReplication or Config.Replica (it
// panics otherwise: a bug). Replicated then moves to min(off, Flushed)
// (Written under ASYNC_FLUSH), from the dispatcher's goroutine.
func (s *Store) AdvanceReplicated(off int64) {
	if !s.externalReplicated() {
		panic("store: AdvanceReplicated without ExternalReplication")
	}
	for {
		cur := s.marks.reported.Load()
		if off <= cur || s.marks.reported.CompareAndSwap(cur, off) {
			break
		}
	}
	s.notifyDispatcher()
}

// ReleaseReplicated moves the Replicated watermark to what AdvanceReplicated
// reported, bounded by the local log as the dispatcher bounds it (Flushed
// under SYNC_FLUSH, Written under ASYNC_FLUSH), and calls back the waiters
// it passes, on the caller's goroutine: a replication service that just
// read an acknowledgement answers the puts it covers at once, instead of
// after the dispatcher's round in progress. It must be called without
// locks a waiter's callback may take. The acknowledger does the same
// after each local flush (the reported offset may come before it), and
// the dispatcher on its next round. Only with Config.ExternalReplication or Config.Replica.
func (s *Store) ReleaseReplicated() {
	if !s.externalReplicated() {
		panic("store: ReleaseReplicated without ExternalReplication")
	}
	s.updateReplicated()
}

// afterFlushed is the CommitLog's AfterFlushed hook: on a synchronous
// master (ExternalReplication) the acknowledger moves Replicated after
// each flush, so a put whose replicas confirmed it before the local
// fdatasync ended is answered right after that fdatasync, not after the
// dispatcher's round in progress. nil otherwise (Replicated is Flushed
// itself, or, on a replica, only what the master confirmed: no put waits
// on it).
func (s *Store) afterFlushed() func() {
	if !s.cfg.ExternalReplication {
		return nil
	}
	return s.updateReplicated
}

// externalReplicated: the Replicated watermark is moved by a replication
// service (a synchronous master's, or a replica's, which shows only what
// its master confirmed).
func (s *Store) externalReplicated() bool { return s.cfg.ExternalReplication || s.cfg.Replica }

// updateReplicated moves an external Replicated watermark to what the
// replication service reported and the local disk holds, and fails it
// with the CommitLog. It runs on the dispatcher's goroutine, on the
// CommitLog's acknowledger after each flush of a synchronous master
// (afterFlushed), and on a replication service's (ReleaseReplicated); all
// only move it forward.
func (s *Store) updateReplicated() {
	if !s.externalReplicated() {
		return
	}
	m := s.marks.replicated
	if err := s.log.Err(); err != nil {
		m.Fail(err)
		return
	}
	if m.Advance(min(s.marks.reported.Load(), s.localConfirmed())) {
		m.Release()
	}
}

// closeMarks answers the store's own waiters left at close.
func (s *Store) closeMarks() {
	for _, m := range []*watermark.Mark{s.marks.visible, s.marks.replicated} {
		if m == nil || m == s.log.Flushed() {
			continue
		}
		m.Close(func(off int64) error {
			if m.Load() >= off {
				return nil
			}
			return fmt.Errorf("store: closed before offset %d was reached: %w", off, ErrClosed)
		})
	}
}

// VisibleFunc is told about one ConsumeQueue entry the dispatcher added:
// its queue, its queue offset and tag code.
type VisibleFunc func(topic string, queueID int32, queueOffset int64, tagsCode int64)

type visibleSub struct{ fn VisibleFunc }

// OnVisible subscribes fn to the Visible watermark's per-queue events:
// the dispatcher calls it, on its goroutine, after every ConsumeQueue entry
// it adds (before Visible passes the record). Any number of subscribers
// may be registered (long polling of every front door, the scheduler); fn
// must not block and must not call back into the store's write path. The
// returned function removes the subscription.
func (s *Store) OnVisible(fn VisibleFunc) (remove func()) {
	sub := &visibleSub{fn: fn}
	s.marks.subMu.Lock()
	defer s.marks.subMu.Unlock()
	var next []*visibleSub
	if cur := s.marks.subs.Load(); cur != nil {
		next = slices.Clone(*cur)
	}
	next = append(next, sub)
	s.marks.subs.Store(&next)
	return func() {
		s.marks.subMu.Lock()
		defer s.marks.subMu.Unlock()
		cur := *s.marks.subs.Load()
		next := slices.DeleteFunc(slices.Clone(cur), func(x *visibleSub) bool { return x == sub })
		s.marks.subs.Store(&next)
	}
}

// tellVisible calls the subscribers about one new ConsumeQueue entry.
func (s *Store) tellVisible(topic string, queueID int32, queueOffset, tagsCode int64) {
	if subs := s.marks.subs.Load(); subs != nil {
		for _, sub := range *subs {
			sub.fn(topic, queueID, queueOffset, tagsCode)
		}
	}
}
