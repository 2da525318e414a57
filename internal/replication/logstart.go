package replication

import "fmt"

// An empty replica (a new slave, or one whose data directory was moved
// away) copies its master's log from the master's first segment: from
// offset 0 if the master still holds it, else from the oldest segment
// retention left (store.StartReplicaAt makes the replica's log start
// there). Its queues then start at the queue offsets of the first records
// it gets, as the master's do after retention.

// planEmpty answers an empty replica: streaming from its log end if the
// master holds that offset, else the master's first offset to start at.
func (m *Master) planEmpty(h hello, ans helloOK) (helloOK, bool, error) {
	st := m.cfg.Store
	first := minOffset(st)
	switch {
	case h.LogEnd%st.SegmentBytes() != 0:
		return ans, false, fmt.Errorf("%w: an empty replica's log starts at %d, not a segment start", ErrDiverged, h.LogEnd)
	case h.LogEnd > ans.MasterEnd:
		return ans, false, fmt.Errorf("%w: an empty replica's log starts at %d, past the master's end %d", ErrDiverged, h.LogEnd, ans.MasterEnd)
	case h.LogEnd < first:
		ans.LogStart = first
		return ans, true, nil
	}
	return ans, false, nil
}

// acceptEmpty handles the master's answer to an empty replica: a start
// later than its log's is taken (errTruncated: reconnect from there).
func (s *Slave) acceptEmpty(h hello, ok helloOK) error {
	if ok.LogStart <= h.LogEnd {
		return nil
	}
	s.log.Info("replication: the master's log starts later (retention deleted its first segments); starting this empty replica there",
		"offset", ok.LogStart)
	if err := s.cfg.Store.StartReplicaAt(ok.LogStart); err != nil {
		return fmt.Errorf("%w: start the log at %d: %w", errFatal, ok.LogStart, err)
	}
	return errTruncated
}
