package store

// SetPutGate installs fn, asked before every put stores anything (PutMessage,
// PutMessages, PutMessagesDeferred, PutRecord, AppendRecord): a result
// other than PutOK refuses the put with that result, nothing written. A
// synchronous master's replication service installs its in-sync check, so
// that the broker's own writes (scheduled deliveries, retries, transaction
// records), which do not pass a front door's send check, are refused at
// once while too few replicas are in sync instead of each being written
// and then waiting out the replication timeout; their engines retry them
// later. fn must be cheap and must not block or put. nil removes the gate.
func (s *Store) SetPutGate(fn func() PutResult) {
	if fn == nil {
		s.putGate.Store(nil)
		return
	}
	s.putGate.Store(&fn)
}
