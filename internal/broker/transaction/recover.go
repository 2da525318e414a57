package transaction

import (
	"fmt"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// readBatch is how many records one store read returns at most.
const (
	readBatch      = 256
	readBatchBytes = 4 << 20
)

// recover rebuilds the in-memory state from the cursor file and the two
// queues: every op record from the op cursor on marks its halves decided,
// then every half record from the half cursor on that no op names is
// undecided (and unverified: its final message may exist already).
func (e *Engine) recover() error {
	c, err := loadCursors(e.cfg.FS, e.cfg.Dir)
	if err != nil {
		return err
	}
	c.half = clamp(c.half, e.st.MinOffset(HalfTopic, 0), e.st.MaxOffset(HalfTopic, 0))
	c.op = clamp(c.op, e.st.MinOffset(OpTopic, 0), e.st.MaxOffset(OpTopic, 0))
	e.saved = c
	e.resolved = newOffsetSet(c.half)
	e.halfSeen, e.opSeen, e.opLow = c.half, c.op, c.op
	if err := e.catchUpOps(); err != nil {
		return err
	}
	if err := e.catchUpHalves(); err != nil {
		return err
	}
	e.log.Info("transactions recovered", "halfCursor", c.half, "opCursor", c.op,
		"pending", len(e.halves), "transactions", len(e.txns))
	return nil
}

func clamp(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }

// readQueue calls fn for every record of (topic, 0) from offset on, up to
// the queue's end at the time of each read, and returns the offset after
// the last one read. Offsets removed by retention are skipped.
func (e *Engine) readQueue(topic string, from int64, stopAt func(off int64) int64, fn func(v message.View) error) (int64, error) {
	for {
		from = stopAt(from)
		if from >= e.st.MaxOffset(topic, 0) {
			return from, nil
		}
		r, err := e.st.GetMessage(topic, 0, from, readBatch, readBatchBytes, nil)
		if err != nil {
			return from, fmt.Errorf("transaction: read %s at %d: %w", topic, from, err)
		}
		switch r.Status {
		case store.Found:
			for _, rec := range r.Records {
				if err := fn(message.View(rec)); err != nil {
					r.Release()
					return from, err
				}
			}
		case store.OffsetTooSmall, store.MessageWasRemoving, store.NoMatchedMessage:
		default:
			r.Release()
			return from, nil
		}
		next := r.NextOffset
		r.Release()
		if next <= from {
			return from, nil
		}
		from = next
	}
}

// catchUpOps reads op records not yet applied (from opSeen on) and applies
// them; ops this process wrote are skipped without reading.
func (e *Engine) catchUpOps() error {
	e.mu.Lock()
	from := e.opSeen
	e.mu.Unlock()
	end, err := e.readQueue(OpTopic, from, e.skipKnownOps, func(v message.View) error {
		e.mu.Lock()
		if _, ok := e.ops[v.QueueOffset()]; !ok {
			e.applyOpLocked(v.QueueOffset(), parseOpBody(v.Body()))
		}
		e.mu.Unlock()
		return nil
	})
	e.mu.Lock()
	e.opSeen = max(e.opSeen, e.skipKnownOpsLocked(end))
	e.mu.Unlock()
	return err
}

func (e *Engine) skipKnownOps(from int64) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	from = e.skipKnownOpsLocked(from)
	e.opSeen = max(e.opSeen, from)
	return from
}

func (e *Engine) skipKnownOpsLocked(from int64) int64 {
	from = max(from, e.opLow)
	for {
		if _, ok := e.ops[from]; !ok {
			return from
		}
		from++
	}
}

// catchUpHalves registers half records not yet known (from halfSeen on):
// halves whose Prepare has not returned yet, and after a restart all
// undecided ones.
func (e *Engine) catchUpHalves() error {
	e.mu.Lock()
	from := e.halfSeen
	e.mu.Unlock()
	end, err := e.readQueue(HalfTopic, from, e.skipKnownHalves, func(v message.View) error {
		hf, id, err := halfFromRecord(v)
		if err != nil {
			e.log.Error("unusable half message skipped", "halfOffset", v.QueueOffset(), "err", err)
			e.mu.Lock()
			e.resolved.add(v.QueueOffset()) // never decidable; do not hold the cursor back
			e.mu.Unlock()
			return nil
		}
		e.mu.Lock()
		e.addHalfLocked(hf, id, true)
		e.mu.Unlock()
		return nil
	})
	e.mu.Lock()
	e.halfSeen = max(e.halfSeen, e.skipKnownHalvesLocked(end))
	e.mu.Unlock()
	return err
}

func (e *Engine) skipKnownHalves(from int64) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	from = e.skipKnownHalvesLocked(from)
	e.halfSeen = max(e.halfSeen, from)
	return from
}

func (e *Engine) skipKnownHalvesLocked(from int64) int64 {
	for e.resolved.has(from) || e.halves[from] != nil {
		from++
	}
	return from
}
