package schedule

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// Run delivers due messages until ctx is done or Close is called, then
// persists the cursors. It returns ErrClosed when called after Close, nil
// otherwise; call it once.
func (s *Service) Run(ctx context.Context) error {
	s.closeMu.Lock()
	if s.closed || s.started.Load() {
		s.closeMu.Unlock()
		return ErrClosed
	}
	s.started.Store(true)
	s.closeMu.Unlock()
	defer close(s.done)
	defer func() {
		if err := s.persist(); err != nil {
			s.log.Error("schedule: save cursors at stop", "err", err)
		}
	}()
	for {
		s.begun.Add(1)
		next := s.round(ctx)
		wait := idleWait
		if next != math.MaxInt64 {
			// Measured after the round, so a slow round does not add to it.
			wait = time.Duration(max(0, next-s.clock.Now().UnixMilli())) * time.Millisecond
		}
		t := s.clock.NewTimer(wait)
		s.rounds.Add(1)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-s.stop:
			t.Stop()
			return nil
		case <-s.wake:
		case <-t.C():
		}
		t.Stop()
	}
}

// idleWait is the sleep when no queue holds anything: wake-ups come from
// Schedule and OnDispatch, so this only bounds the damage of a lost signal.
const idleWait = time.Minute

// round handles every due entry and returns when to run again (Unix ms;
// MaxInt64 = only when woken): the earliest pending action time, a short
// re-check while an own put is not yet visible, or RetryInterval after a
// failure.
func (s *Service) round(ctx context.Context) int64 {
	now := s.clock.Now().UnixMilli()
	next := int64(math.MaxInt64)
	for _, q := range s.queues {
		if ctx.Err() != nil {
			break
		}
		next = min(next, s.serveQueue(ctx, q, now))
	}
	if err := s.persist(); err != nil {
		s.log.Error("schedule: save cursors", "err", err)
		next = min(next, now+s.cfg.RetryInterval.Milliseconds())
	}
	return next
}

// serveQueue handles the due entries of q and returns when to look at it
// again (Unix ms; MaxInt64 = only when woken).
func (s *Service) serveQueue(ctx context.Context, q *queue, now int64) int64 {
	if next, ok := s.waitConfirmed(q, now); !ok {
		return next
	}
	budget := s.cfg.RoundBudget
	for budget > 0 {
		maxOff := s.st.MaxOffset(q.key.topic, q.key.id)
		if q.cursor >= maxOff {
			if q.cursor > maxOff {
				s.log.Warn("schedule: queue shrank below the cursor", "topic", q.key.topic, "queue", q.key.id,
					"cursor", q.cursor, "maxOffset", maxOff)
				q.cursor = maxOff
			}
			if q.known.Load() > maxOff {
				return now + s.cfg.DispatchWait.Milliseconds()
			}
			return math.MaxInt64
		}
		res, err := s.st.GetMessage(q.key.topic, q.key.id, q.cursor, min(budget, s.cfg.ReadBatch), s.cfg.ReadBytes, nil)
		if errors.Is(err, store.ErrCorrupt) {
			// The store never hands out a record failing verification;
			// such an entry can never be delivered, so it is passed.
			s.log.Error("schedule: corrupt entry skipped", "topic", q.key.topic, "queue", q.key.id, "offset", q.cursor, "err", err)
			q.cursor++
			budget--
			continue
		}
		if err != nil {
			s.log.Error("schedule: read queue", "topic", q.key.topic, "queue", q.key.id, "offset", q.cursor, "err", err)
			return now + s.cfg.RetryInterval.Milliseconds()
		}
		next, n, ok := s.handleBatch(ctx, q, res, now)
		res.Release()
		if !ok {
			return next
		}
		budget -= max(n, 1)
	}
	return now // budget used up: come back at once
}

// handleBatch handles the records of one read. It returns the next look
// time when the queue must wait, the number of entries consumed, and
// whether the caller may keep reading.
func (s *Service) handleBatch(ctx context.Context, q *queue, res *store.GetResult, now int64) (next int64, n int, more bool) {
	switch res.Status {
	case store.Found:
	case store.OffsetTooSmall, store.MessageWasRemoving:
		s.log.Warn("schedule: entries removed before delivery", "topic", q.key.topic, "queue", q.key.id,
			"cursor", q.cursor, "minOffset", res.MinOffset)
		return s.skipTo(q, max(res.MinOffset, res.NextOffset))
	case store.OffsetOverflowBadly:
		q.cursor = res.MaxOffset
		return math.MaxInt64, 0, false
	case store.NoMatchedMessage:
		return s.skipTo(q, res.NextOffset)
	default: // NoMessageInQueue, OffsetOverflowOne, NoMatchedLogicQueue: nothing yet
		return math.MaxInt64, 0, false
	}
	b := outBatch{q: q}
	for _, rec := range res.Records {
		v := message.View(rec)
		at := actionMs(s.cfg.DelayLevels, q.key.topic, q.key.id, v)
		if at <= now {
			at, _ = s.finalWait(q, v, now)
		}
		if at > now {
			if err := s.flushBatch(ctx, &b); err != nil {
				return s.putFailed(q, err, now), b.n, false
			}
			return at, b.n, false
		}
		m, k, ok := s.next(q, rec, now)
		if ok && b.bytes > 0 && b.bytes+len(m.Body)+len(m.Properties) > s.cfg.PutBatchBytes {
			if err := s.flushBatch(ctx, &b); err != nil {
				return s.putFailed(q, err, now), b.n, false
			}
		}
		b.add(m, k, v.QueueOffset(), ok)
	}
	if err := s.flushBatch(ctx, &b); err != nil {
		return s.putFailed(q, err, now), b.n, false
	}
	// Entries the store skipped (it never hands out a corrupt record) are
	// passed by NextOffset.
	if res.NextOffset > q.cursor {
		q.cursor = res.NextOffset
	}
	return math.MaxInt64, b.n, true
}

func (s *Service) putFailed(q *queue, err error, now int64) int64 {
	if errors.Is(err, errUnconfirmed) {
		s.log.Warn("schedule: delivery written but not yet confirmed (replicas or disk late); waiting for it, not putting it again",
			"topic", q.key.topic, "queue", q.key.id, "cursor", q.cursor)
		next, _ := s.waitConfirmed(q, now)
		return next
	}
	s.log.Error("schedule: put", "topic", q.key.topic, "queue", q.key.id, "cursor", q.cursor, "err", err)
	return now + s.cfg.RetryInterval.Milliseconds()
}

// outBatch collects the puts for consecutive due entries of one queue; they
// are appended together, all or nothing.
type outBatch struct {
	q     *queue
	msgs  []*message.Message
	keys  []qkey // schedule queue a message goes to (zero for a delivery)
	last  int64  // queue offset of the last entry covered
	bytes int
	n     int // entries consumed so far
}

// add covers the entry at queue offset off: with its outgoing message, or
// (ok false) as an entry to pass.
func (b *outBatch) add(m *message.Message, k qkey, off int64, ok bool) {
	if !ok {
		if len(b.msgs) == 0 {
			b.q.cursor = off + 1
			b.n++
			return
		}
		b.last = off
		return
	}
	b.msgs = append(b.msgs, m)
	b.keys = append(b.keys, k)
	b.last = off
	b.bytes += len(m.Body) + len(m.Properties)
}

// flushBatch appends the batch and moves the cursor past it.
func (s *Service) flushBatch(ctx context.Context, b *outBatch) error {
	if len(b.msgs) == 0 {
		return nil
	}
	res := s.st.PutMessages(ctx, b.msgs)
	var err error
	switch res.Status {
	case store.PutOK:
	case store.PutFlushDiskTimeout, store.PutFlushSlaveTimeout:
		// Written, not confirmed in time (the sync or the replicas are
		// late). Putting the batch again would deliver it twice: the
		// cursor moves past it, and is saved past it only once the store
		// confirms it.
		if !s.unconfirmed(b.q, b.q.cursor) {
			if res.Status == store.PutFlushSlaveTimeout {
				return fmt.Errorf("append %d messages: %s: %w", len(b.msgs), res.Status, res.Err)
			}
			break // persist flushes before the cursor moves on disk
		}
		err = errUnconfirmed
	default:
		return fmt.Errorf("append %d messages: %s: %w", len(b.msgs), res.Status, res.Err)
	}
	for i, m := range b.msgs {
		if q := s.byKey[b.keys[i]]; q != nil {
			raiseTo(&q.known, m.QueueOffset+1)
		}
	}
	b.n += int(b.last + 1 - b.q.cursor)
	b.q.cursor = b.last + 1
	b.msgs, b.keys, b.bytes = b.msgs[:0], b.keys[:0], 0
	return err
}

func (s *Service) skipTo(q *queue, off int64) (int64, int, bool) {
	if off > q.cursor {
		q.cursor = off
		return math.MaxInt64, 1, true
	}
	return math.MaxInt64, 0, false
}

// finalWait reports whether v is a timer entry with less than timerFinalMs
// left: it stays at the head of its queue until its due time instead of
// moving to another queue.
func (s *Service) finalWait(q *queue, v message.View, now int64) (int64, bool) {
	if q.key.topic != TimerTopic {
		return 0, false
	}
	due, ok := timerDue(v.Properties())
	if ok && due > now && due-now < timerFinalMs {
		return due, true
	}
	return 0, false
}

// next returns the message to put for a due entry: the delivery, or for a
// timer entry not yet due the same entry in the queue for its remaining
// delay (k is then that queue). ok is false for an entry that cannot be
// delivered; it is logged and passed.
func (s *Service) next(q *queue, rec []byte, now int64) (m *message.Message, k qkey, ok bool) {
	m, err := message.Decode(rec)
	if err != nil {
		s.log.Error("schedule: undecodable entry skipped", "topic", q.key.topic, "queue", q.key.id, "err", err)
		return nil, qkey{}, false
	}
	if q.key.topic == TimerTopic {
		if due, ok := timerDue([]byte(m.Properties)); ok && due > now {
			k = qkey{TimerTopic, TimerQueue(due - now)}
			m.Topic, m.QueueID = k.topic, k.id
			m.QueueOffset, m.PhysOffset, m.StoreTimestamp = 0, 0, 0
			return m, k, true
		}
	}
	_, canFlush := s.st.(flusher)
	out, err := deliverable(m, canFlush)
	if err != nil {
		s.log.Error("schedule: entry cannot be delivered; skipped", "topic", q.key.topic, "queue", q.key.id,
			"offset", m.QueueOffset, "err", err)
		return nil, qkey{}, false
	}
	return out, qkey{}, true
}

// deliverable turns a due schedule entry into the message for its real
// topic and queue. WAIT=false (the store need not sync before it returns)
// is set only when the cursors are saved after an explicit flush; otherwise
// the put itself must be durable under SYNC_FLUSH before the cursor moves.
func deliverable(m *message.Message, noWait bool) (*message.Message, error) {
	topic, ok := message.Property(m.Properties, message.PropRealTopic)
	if !ok || topic == "" || len(topic) > message.MaxTopicBytes || IsScheduleTopic(topic) {
		return nil, fmt.Errorf("bad REAL_TOPIC %q", topic)
	}
	qs, _ := message.Property(m.Properties, message.PropRealQueueID)
	qid, err := strconv.ParseInt(qs, 10, 32)
	if err != nil || qid < 0 {
		return nil, fmt.Errorf("bad REAL_QID %q", qs)
	}
	props := m.Properties
	for _, k := range []string{message.PropDelayLevel, message.PropTimerDeliverMs, message.PropTimerDelaySec,
		message.PropTimerDelayMs, message.PropTimerOutMs, message.PropTimerEnqueueMs} {
		props = message.DeleteProperty(props, k)
	}
	if noWait {
		props = message.SetProperty(props, message.PropWaitStoreMsgOK, "false")
	} else {
		props = message.DeleteProperty(props, message.PropWaitStoreMsgOK)
	}
	return &message.Message{
		Topic: topic, QueueID: int32(qid), Flag: m.Flag, SysFlag: m.SysFlag,
		BornTimestamp: m.BornTimestamp, BornHost: m.BornHost, StoreHost: m.StoreHost,
		ReconsumeTimes: m.ReconsumeTimes, PreparedTxOffset: m.PreparedTxOffset,
		Body: m.Body, Properties: props,
	}, nil
}

// persist makes delivered puts durable and then writes the cursors, if any
// moved since the last write.
func (s *Service) persist() error {
	dirty := false
	for _, q := range s.queues {
		if q.savable() != q.saved {
			dirty = true
			break
		}
	}
	if !dirty {
		return nil
	}
	if f, ok := s.st.(flusher); ok {
		if err := f.Flush(); err != nil {
			return fmt.Errorf("schedule: flush store before saving cursors: %w", err)
		}
	}
	cur := make(map[qkey]int64, len(s.queues))
	for _, q := range s.queues {
		cur[q.key] = q.savable()
	}
	if s.cfg.OnCursors != nil {
		byTopic := map[string]map[int32]int64{}
		for k, off := range cur {
			if byTopic[k.topic] == nil {
				byTopic[k.topic] = map[int32]int64{}
			}
			byTopic[k.topic][k.id] = off
		}
		if err := s.cfg.OnCursors(byTopic); err != nil {
			return fmt.Errorf("schedule: log cursors: %w", err)
		}
	}
	if err := saveCursors(s.cfg.FS, s.cfg.Dir, cur); err != nil {
		return err
	}
	for _, q := range s.queues {
		q.saved = cur[q.key]
		q.durable.Store(q.saved)
	}
	return nil
}
