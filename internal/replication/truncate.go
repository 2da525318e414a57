package replication

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/commitlog"
)

// Truncation of a diverged replica (KIP-101/279 style). The master
// answers a replica's HELLO with where the two logs last agree: the end
// of the newest epoch both histories hold (same epoch, same start),
// capped by the replica's end of it and the master's (TruncationPoint).
// If that is below the replica's log end, the replica truncates its
// CommitLog there durably (store.TruncateReplica: intent file, cut and
// fdatasync, checkpoint; finished by the next Open after a crash), then
// its epoch history, and reconnects; the second HELLO then checks as a
// prefix (CheckDivergence, the tail CRC) and streaming starts.
//
// A replica never truncates below what it showed (its Visible, its
// Confirmed, the master's confirmed offset it was told): consumers may
// have read those records. It shows only what the master confirmed, so
// this holds whenever the master still has what it confirmed; a master
// that lost confirmed bytes (one over ASYNC_FLUSH after a power loss)
// gets a replica that stops with ErrDiverged, keeping them, instead of
// taking back reads.

// TruncationPoint returns the offset up to which a replica whose log ends
// at replicaEnd, with epoch history replica, agrees with a master of
// history master whose log ends at masterEnd: the end of the newest epoch
// both hold with the same start, the smaller of its end on either side
// (the next epoch's start, or the log end). ok is false if the replica
// holds bytes of no epoch the master knows (nothing can be kept, and
// nothing is truncated: the replica stops). Epochs of the replica that
// start at or after replicaEnd hold no bytes and are not looked at.
func TruncationPoint(replica History, replicaEnd int64, master History, masterEnd int64) (int64, bool) {
	if replicaEnd == 0 {
		return 0, true
	}
	for i := replica.at(replicaEnd - 1); i >= 0; i-- {
		e := replica[i]
		j := -1
		for k, me := range master {
			if me == e {
				j = k
			}
		}
		if j < 0 {
			continue
		}
		rEnd := replicaEnd
		if i+1 < len(replica) {
			rEnd = min(rEnd, replica[i+1].Start)
		}
		mEnd := masterEnd
		if j+1 < len(master) {
			mEnd = min(mEnd, master[j+1].Start)
		}
		return max(e.Start, min(rEnd, mEnd)), true
	}
	return 0, false
}

// trimHistory drops the epochs that start at or after end: they hold no
// bytes of a log ending there (a truncation cut them, or a crash lost
// bytes recorded ahead).
func trimHistory(h History, end int64) History {
	i := len(h)
	for i > 0 && h[i-1].Start >= end {
		i--
	}
	return h[:i]
}

// truncateTo cuts the replica's log to off (the master's answer), durably,
// then its epoch history. tail is the master's CRC trailer of the record
// ending at off (empty at 0 or a segment start): the replica's must be the
// same, or the logs were never one (nothing is cut).
func (s *Slave) truncateTo(off int64, tail []byte) error {
	st := s.cfg.Store
	end := st.Offset(store.Written)
	if off >= end {
		return nil
	}
	if len(tail) > 0 {
		own := make([]byte, tailBytes)
		if err := st.ReadCommitLog(own, off-tailBytes); err != nil {
			return fmt.Errorf("%w: reading the replica's bytes before the truncation point %d: %w", ErrDiverged, off, err)
		}
		if !bytes.Equal(own, tail) {
			return fmt.Errorf("%w: the record before the truncation point %d has CRC %x here, %x on the master", ErrDiverged, off, own, tail)
		}
	} else if off%st.SegmentBytes() != 0 {
		return fmt.Errorf("%w: the master sent no tail for the truncation point %d", ErrDiverged, off)
	}
	s.log.Warn("replication: truncating the replica's log to where it agrees with the master's",
		"offset", off, "log_end", end, "bytes", end-off)
	if err := st.TruncateReplica(off); err != nil {
		if errors.Is(err, store.ErrTruncateVisible) && s.cfg.TruncateShown {
			n, cerr := countRecords(st, off, end)
			if cerr != nil {
				return fmt.Errorf("%w: counting the records past the truncation point %d: %w", ErrDiverged, off, cerr)
			}
			return fmt.Errorf("%w", &ShownTruncation{Offset: off, LogEnd: end, Records: n})
		}
		if errors.Is(err, store.ErrTruncateVisible) {
			return fmt.Errorf("%w: %w (an operator must decide: see docs/replication.md)", ErrDiverged, err)
		}
		if errors.Is(err, store.ErrNotBoundary) {
			return fmt.Errorf("%w: the master's truncation point is not a record boundary here: %w", ErrDiverged, err)
		}
		if st.Err() == nil {
			// Refused before anything was cut (the disk full while the
			// shown state was made durable): try again on the next
			// connection.
			return fmt.Errorf("replication: truncate at %d: %w", off, err)
		}
		return fmt.Errorf("%w: truncate at %d: %w", errFatal, off, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := trimHistory(s.hist, off)
	if len(h) != len(s.hist) {
		if err := SaveHistory(s.cfg.FS, s.path, h); err != nil {
			return fmt.Errorf("%w: %w", errFatal, err)
		}
		s.hist = h
	}
	s.truncations.Add(1)
	return nil
}

// countRecords counts the records of the log in [off, end) (blank
// segment ends not included).
func countRecords(st *store.Store, off, end int64) (int, error) {
	n := 0
	var buf []byte
	for pos := off; pos < end; {
		raw, next, err := st.ReadReplication(pos, end, 1<<20, buf)
		if err != nil {
			return n, err
		}
		if next <= pos {
			return n, fmt.Errorf("no progress reading at %d", pos)
		}
		if _, err := commitlog.WalkRaw(raw, pos, st.SegmentBytes(), func(_ int64, _ []byte, blank bool) error {
			if !blank {
				n++
			}
			return nil
		}); err != nil {
			return n, err
		}
		pos, buf = next, raw
	}
	return n, nil
}

// masterTail returns the master's CRC trailer of the record ending at off
// (nil at 0 or a segment start).
func masterTail(st *store.Store, off int64) ([]byte, error) {
	if off == 0 || off%st.SegmentBytes() == 0 {
		return nil, nil
	}
	b := make([]byte, tailBytes)
	if err := st.ReadCommitLog(b, off-tailBytes); err != nil {
		return nil, err
	}
	return b, nil
}

// answerDivergence answers a replica's HELLO as planHello decides: a
// truncation point is sent (cut: the connection then ends); ok means
// streaming may start; err is a refusal to send.
func (m *Master) answerDivergence(c net.Conn, h hello, masterEnd int64) (cut, ok bool, err error) {
	ans, cut, err := m.planHello(h, masterEnd)
	if err != nil || !cut {
		return false, err == nil, err
	}
	if h.Empty {
		m.log.Info("replication: empty replica; telling it to start at the master's first segment", "replica", h.BrokerID,
			"log_end", h.LogEnd, "start", ans.LogStart)
	} else {
		m.log.Warn("replication: replica diverged; telling it to truncate", "replica", h.BrokerID,
			"log_end", h.LogEnd, "truncate_to", ans.TruncateTo, "master_end", masterEnd)
	}
	c.SetWriteDeadline(time.Now().Add(time.Duration(idleTimeoutHeartbeats) * m.cfg.HeartbeatInterval))
	if _, err := c.Write(appendFrame(nil, typeHelloOK, ans.encode())); err != nil {
		m.log.Warn("replication: could not tell the replica where to truncate", "replica", h.BrokerID, "err", err)
	}
	return true, false, nil
}

// planHello decides on a replica's HELLO: a log that is a prefix of the
// master's passes (the answer's TruncateTo is its end, cut false); one
// that holds bytes the master does not have is told where to truncate
// (cut); one that shares no epoch with the master, or whose last record
// differs from the master's at the same place, is refused (err wrapping
// ErrDiverged).
func (m *Master) planHello(h hello, masterEnd int64) (helloOK, bool, error) {
	st := m.cfg.Store
	ans := helloOK{MasterEnd: masterEnd, Epochs: m.hist, TruncateTo: h.LogEnd}
	if h.Empty {
		// Nothing to compare: it starts where its log starts, or at the
		// master's first segment if that is later (logstart.go).
		return m.planEmpty(h, ans)
	}
	if err := CheckDivergence(h.Epochs, h.LogEnd, m.hist, masterEnd); err == nil {
		return ans, false, checkTail(st, h)
	}
	at, found := TruncationPoint(h.Epochs, h.LogEnd, m.hist, masterEnd)
	if !found {
		return ans, false, CheckDivergence(h.Epochs, h.LogEnd, m.hist, masterEnd)
	}
	tail, err := masterTail(st, at)
	if err != nil {
		return ans, false, fmt.Errorf("%w: reading the master's bytes before the truncation point %d: %w", ErrDiverged, at, err)
	}
	ans.TruncateTo, ans.Tail = at, tail
	return ans, true, nil
}

// errTruncated ends a session after the replica truncated its log: it
// reconnects at once and states its new end.
var errTruncated = errors.New("replication: replica log truncated to the master's; reconnecting")

// Truncations returns how many times this replica truncated its log to
// its master's since it started.
func (s *Slave) Truncations() int64 { return s.truncations.Load() }
