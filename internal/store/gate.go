package store

import (
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/record"
)

// SetPutGate installs fn, asked before every put stores anything (PutMessage,
// PutMessages, PutMessagesDeferred, PutRecord, AppendRecord) except of a
// system record: a result other than PutOK refuses the put with that
// result, nothing written. A synchronous master's replication service
// installs its in-sync check, so that the broker's own writes (scheduled
// deliveries, retries, transaction records), which do not pass a front
// door's send check, are refused at once while too few replicas are in
// sync instead of each being written and then waiting out the replication
// timeout; their engines retry them later. System records (the metadata
// that travels with the log) are not gated: the broker changes its own
// tables, at start too, whether or not a slave is in sync, and waits for
// them as it decides (docs/replication.md). fn must be cheap and must not
// block or put. nil removes the gate.
func (s *Store) SetPutGate(fn func() PutResult) {
	if fn == nil {
		s.putGate.Store(nil)
		return
	}
	s.putGate.Store(&fn)
}

// gatePut asks the put gate about a put of ms (or, for PutRecord and
// AppendRecord, of req.recs).
func (s *Store) gatePut(req *putReq, ms []*message.Message) (PutResult, bool) {
	g := s.putGate.Load()
	if g == nil {
		return PutResult{}, true
	}
	if ms[0] == nil && len(req.recs) == 1 && recordType(req.recs[0]) == record.System {
		return PutResult{}, true
	}
	if r := (*g)(); !r.OK() {
		return r, false
	}
	return PutResult{}, true
}
