package kafka

// Transaction markers and what read_committed consumers see (txn.go).
//
// A marker is a control batch, as Kafka writes it: a RecordBatch v2 with
// the transactional and control attribute bits (0x30), the transaction's
// producer id and epoch, baseSequence -1 and one record whose key is
// (version int16 0, type int16: 0 abort, 1 commit) and whose value is
// (version int16 0, coordinatorEpoch int32 0). It is stored like any
// produced batch (one Kafka-batch record, one ConsumeQueue entry, so it
// takes one offset) under the partition's append lock; clients skip
// control batches, and the RocketMQ and AMQP conversions drop them.
//
// The last stable offset of a partition is the first possible offset of
// its earliest open transaction (the high watermark when it was added),
// or the high watermark when none is open. A read_committed Fetch serves
// batches below it only and lists the aborted transactions whose marker
// is at or after the fetch offset and whose first offset is below the end
// of what it served; ListOffsets latest answers it.

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	attrTransactional = 0x10
	attrControl       = 0x20
)

// controlBatch is a marker of producer pid, epoch (commit or abort),
// stamped ms.
func controlBatch(pid int64, epoch int16, commit bool, ms int64) []byte {
	typ := byte(0)
	if commit {
		typ = 1
	}
	// The record: attributes, timestampDelta 0, offsetDelta 0, key 4
	// bytes, value 6 bytes, no headers (varints: 4 and 6 are 8 and 12).
	rec := []byte{0, 0, 0, 8, 0, 0, 0, typ, 12, 0, 0, 0, 0, 0, 0, 0}
	b := make([]byte, batchHeaderBytes, batchHeaderBytes+1+len(rec))
	binary.BigEndian.PutUint32(b[8:], uint32(batchHeaderBytes-12+1+len(rec)))
	b[16] = 2
	binary.BigEndian.PutUint16(b[21:], attrTransactional|attrControl)
	binary.BigEndian.PutUint32(b[23:], 0) // lastOffsetDelta
	binary.BigEndian.PutUint64(b[27:], uint64(ms))
	binary.BigEndian.PutUint64(b[35:], uint64(ms))
	binary.BigEndian.PutUint64(b[43:], uint64(pid))
	binary.BigEndian.PutUint16(b[51:], uint16(epoch))
	binary.BigEndian.PutUint32(b[53:], 0xffffffff) // baseSequence -1
	binary.BigEndian.PutUint32(b[57:], 1)
	b = append(b, byte(len(rec)<<1)) // the record's length, a zigzag varint
	b = append(b, rec...)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

// writeMarker appends a marker to queue qid of topic; it returns its
// offset and the CommitLog offset it ends at.
func (s *Server) writeMarker(topic string, qid int32, pid int64, epoch int16, commit bool) (offset, end int64, code int16) {
	batch := controlBatch(pid, epoch, commit, s.parts.now().UnixMilli())
	rec, err := record.AppendEnvelopeFlags(nil, record.KafkaBatch, record.FlagEntryPerMessage, 1,
		[]record.Dest{{Topic: topic, QueueID: qid}}, batch)
	if err != nil {
		return -1, -1, errKafkaStorage
	}
	part := s.parts.get(topic, qid)
	part.appendMu.Lock()
	base := int64(-1)
	leaderEpoch := s.writeEpoch() // a marker carries the leader's epoch, as any batch
	r, _, end := s.st.AppendRecordPatched(s.ctx, rec, func(body []byte, _ int, first, _ int64) {
		assignBase(body, first, leaderEpoch)
		base = first
	})
	part.appendMu.Unlock()
	if r.Status != store.PutOK {
		s.log.Warn("kafka: transaction marker refused by the store", "topic", topic, "queue_id", qid, "status", r.Status, "err", r.Err)
		if !s.leads() {
			return -1, -1, errNotCoordinator
		}
		return -1, -1, errCoordinatorNotAvailable // the completion is retried
	}
	return base, end, errNone
}

// servesCommitted reports whether this door answers read_committed reads
// (Fetch and ListOffsets with isolation level 1): their last stable
// offset and aborted transactions come from the transaction
// coordinator's state, which a slave's door (Config.Follower) holds only
// as it replayed it at its start; the transactions begun or ended on the
// master since would be missing (an open one's records served, an
// aborted one's served as committed). A slave's door answers those reads
// NOT_LEADER_OR_FOLLOWER, and the leader sends no read_committed fetch to
// a slave (no PreferredReadReplica): they are the leader's.
func (s *Server) servesCommitted() bool { return !s.cfg.Follower }

// lastStable is the LSO of partition part whose high watermark is hwm.
func (s *Server) lastStable(part *partition, hwm int64) int64 {
	c := s.txn
	c.mu.Lock()
	defer c.mu.Unlock()
	lso := hwm
	for _, start := range c.open[part.key] {
		lso = min(lso, start)
	}
	return lso
}

// abortedIn lists the aborted transactions of part that a read_committed
// consumer reading [from, to) must know.
func (s *Server) abortedIn(part *partition, from, to int64) []kmsg.FetchResponseTopicPartitionAbortedTransaction {
	c := s.txn
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
	for _, a := range c.aborted[part.key] {
		if a.Last >= from && a.First < to {
			at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
			at.ProducerID, at.FirstOffset = a.PID, a.First
			out = append(out, at)
		}
	}
	return out
}
