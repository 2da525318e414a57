package replication

// OFFSETS: consumer offsets committed on a replica, handed to the master.
//
// A replica cannot write its log (it is the master's), so offsets that
// consumers committed on it while the master was away are kept by the
// replica's broker (core.ReplicaOffsets) and sent to the master at the
// start of every session, right after HELLO_OK and before the replica's
// first ACK:
//
//	OFFSETS  S→M  u32 N, N × (group string, topic string, queue u32, offset u64)
//
// (at most maxOffsetsPerFrame entries a frame; several frames for more).
// While the session streams, offsets committed on the replica since its
// last report are sent within offsetsResendInterval (a report the broker
// could not give yet, before it was built, too).
// The master hands them to its broker (MasterConfig.OnReplicaOffsets),
// which takes an offset only if it is ahead of its own and then logs it
// like any commit; the record reaching the replica is what lets it forget
// its copy, so a report lost with a connection is sent again at the next
// session.

import (
	"fmt"
	"net"
	"time"
)

// typeOffsets is the OFFSETS frame (replica -> master).
const typeOffsets byte = 0x20

// maxOffsetsPerFrame bounds the entries of one OFFSETS frame, so that a
// frame stays below maxReplicaFrameBytes.
const maxOffsetsPerFrame = 1000

// maxReplicaFrameBytes bounds a frame the master reads from a replica
// (ACK, OFFSETS).
const maxReplicaFrameBytes = 1 << 20

// OffsetReport is one consumer offset committed on a replica.
type OffsetReport struct {
	Group, Topic string
	QueueID      int32
	Offset       int64
}

func encodeOffsets(offs []OffsetReport) []byte {
	var e enc
	e.u32(uint32(len(offs)))
	for _, o := range offs {
		e.str(o.Group)
		e.str(o.Topic)
		e.u32(uint32(o.QueueID))
		e.i64(o.Offset)
	}
	return e.b
}

func decodeOffsets(p []byte) ([]OffsetReport, error) {
	d := dec{b: p}
	n := d.u32()
	if d.err == nil && (n > maxOffsetsPerFrame || int(n)*(2+2+4+8) > len(d.b)) {
		return nil, fmt.Errorf("%w: %d offsets in %d bytes", ErrMalformed, n, len(d.b))
	}
	out := make([]OffsetReport, 0, n)
	for range n {
		o := OffsetReport{Group: d.str(), Topic: d.str(), QueueID: int32(d.u32()), Offset: d.off()}
		if d.err == nil && (o.Group == "" || o.Topic == "" || o.QueueID < 0) {
			d.err = fmt.Errorf("%w: offset entry %+v", ErrMalformed, o)
		}
		out = append(out, o)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d bytes after the offsets", ErrMalformed, len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

// offsetsResendInterval is how often a session looks for offsets
// committed on the replica since it last reported (the acker sends them).
const offsetsResendInterval = time.Second

// sendOffsets sends the replica's pending offsets (SlaveConfig.
// LocalOffsets) on a session's connection, before the acks start.
func (s *Slave) sendOffsets(c net.Conn, idle time.Duration) error {
	s.offsMu.Lock()
	s.offsSent = nil
	s.offsMu.Unlock()
	return s.resendOffsets(c, idle)
}

// resendOffsets sends the pending offsets if they differ from what this
// session reported last (from the acker goroutine, which owns the
// connection's writes once the session streams).
func (s *Slave) resendOffsets(c net.Conn, idle time.Duration) error {
	if s.cfg.LocalOffsets == nil {
		return nil
	}
	offs := s.cfg.LocalOffsets()
	now := make(map[OffsetReport]bool, len(offs))
	for _, o := range offs {
		now[o] = true
	}
	s.offsMu.Lock()
	same := len(now) == len(s.offsSent)
	for o := range now {
		same = same && s.offsSent[o]
	}
	s.offsSent = now
	s.offsMu.Unlock()
	if same {
		return nil
	}
	for len(offs) > 0 {
		n := min(len(offs), maxOffsetsPerFrame)
		c.SetWriteDeadline(time.Now().Add(idle))
		if _, err := c.Write(appendFrame(nil, typeOffsets, encodeOffsets(offs[:n]))); err != nil {
			return err
		}
		s.log.Info("replication: offsets committed on this replica sent to the master", "offsets", n)
		offs = offs[n:]
	}
	return nil
}

// onOffsets handles an OFFSETS frame of replica f.
func (m *Master) onOffsets(f *follower, p []byte) error {
	offs, err := decodeOffsets(p)
	if err != nil {
		return err
	}
	m.log.Info("replication: replica reports offsets committed on it", "replica", f.id, "offsets", len(offs))
	if m.cfg.OnReplicaOffsets != nil {
		m.cfg.OnReplicaOffsets(f.id, offs)
	}
	return nil
}
