package transaction

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// Pending describes one undecided half message.
type Pending struct {
	TransactionID   string `json:"transactionId"`
	Topic           string `json:"topic"`
	QueueID         int32  `json:"queueId"`
	ProducerGroup   string `json:"producerGroup"`
	HalfOffset      int64  `json:"halfOffset"`
	CommitLogOffset int64  `json:"commitLogOffset"`
	StoreTimeMs     int64  `json:"storeTimeMs"`
	AgeMs           int64  `json:"ageMs"`
	Checks          int32  `json:"checks"`
}

// PendingList is the response body of remoting.ReqListTransactions.
type PendingList struct {
	Total   int       `json:"total"` // matching entries before the limit
	Pending []Pending `json:"pending"`
}

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

// HandleList serves remoting.ReqListTransactions. Request ext: "topic"
// and "producerGroup" (optional filters), "limit" (optional, default
// 1000). Response body: JSON, see PendingList.
func (e *Engine) HandleList(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	limit := 1000
	if req.Ext("limit") != "" {
		n, err := req.ExtInt32("limit")
		if err != nil || n < 0 {
			return req.NewResponse(remoting.ResSystemError, "bad limit")
		}
		limit = int(n)
	}
	body, err := json.Marshal(e.List(req.Ext("topic"), req.Ext("producerGroup"), limit))
	if err != nil {
		return req.NewResponse(remoting.ResSystemError, err.Error())
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp
}

// Age is p's age as a duration.
func (p Pending) Age() time.Duration { return time.Duration(p.AgeMs) * time.Millisecond }
