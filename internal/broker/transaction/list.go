package transaction

import (
	"sort"

	"github.com/keelmq/keel/internal/core"
)

// Pending describes one undecided half message.
type Pending = core.PendingTransaction

// PendingList lists undecided half messages (the response body of
// remoting.ReqListTransactions).
type PendingList = core.PendingTransactions

// List returns the undecided half messages of topic and producer group
// (empty = any), oldest first, at most limit (<= 0: all). Age counts from
// the store time of the half record (a re-put for a check-back restarts it).
func (e *Engine) List(topic, group string, limit int) PendingList {
	now := e.cfg.Now().UnixMilli()
	e.mu.Lock()
	out := make([]Pending, 0)
	for _, h := range e.halves {
		if (topic != "" && h.topic != topic) || (group != "" && h.group != group) {
			continue
		}
		out = append(out, Pending{TransactionID: h.txn.id, Topic: h.topic, QueueID: h.queueID,
			ProducerGroup: h.group, HalfOffset: h.offset, CommitLogOffset: h.phys,
			StoreTimeMs: h.storeTs, AgeMs: now - h.storeTs, Checks: h.checks})
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].HalfOffset < out[j].HalfOffset })
	total := len(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return PendingList{Total: total, Pending: out}
}
