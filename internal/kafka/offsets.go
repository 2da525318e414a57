package kafka

// OffsetCommit and OffsetFetch over the core's committed offsets, which
// are queue offsets (entries: what disk pressure and lag read). A Kafka
// offset K is committed as the entry of the batch holding K (or the entry
// count when K is the high watermark), and read back as that batch's base
// offset: exact when a consumer commits at a batch boundary (the offset
// after the last record of what it fetched, the usual case); otherwise it
// would restart at the start of the batch, so the exact offset is also
// kept in memory (Server.exact) beside the entry it was committed as, and
// OffsetFetch answers it while the core still holds that entry; after a
// restart a commit inside a batch restarts at the batch's start (records
// delivered again, never skipped). A commit is acknowledged only after
// the offsets file is written durably (core.FlushOffsets). Commit
// metadata is not kept.
// Offsets are keyed by group name, shared with a RocketMQ group of the
// same name.

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (s *Server) offsetCommit(req *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	code := errNone
	if req.Generation >= 0 || req.MemberID != "" {
		s.gmu.Lock()
		if g := s.groups[req.Group]; g != nil && len(g.members) > 0 {
			_, _, code = s.checkMember(req.Group, req.MemberID, req.Generation)
			// As Kafka: the current generation may commit while the next
			// rebalance is prepared (cooperative members do), not while
			// its assignment is being decided.
			if code == errNone && g.state == groupCompleting {
				code = errRebalanceInProgress
			}
		}
		s.gmu.Unlock()
	}
	committed := false
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			if code == errNone {
				rp.ErrorCode = s.commitPartition(req.Group, t.Topic, p.Partition, p.Offset)
				committed = committed || rp.ErrorCode == errNone
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if committed {
		if err := s.core.FlushOffsets(); err != nil {
			s.log.Error("kafka: offset commit not durable", "group", req.Group, "err", err)
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					resp.Topics[i].Partitions[j].ErrorCode = errKafkaStorage
				}
			}
		}
	}
	return resp
}

func (s *Server) commitPartition(group, topic string, p int32, off int64) int16 {
	if code := s.checkRead(topic, p); code != errNone {
		return code
	}
	part := s.parts.get(topic, p)
	hwm, err := s.parts.highWatermark(part)
	if err != nil {
		return errKafkaStorage
	}
	var entry int64
	switch {
	case off < 0:
		return errOffsetOutOfRange
	case off >= hwm:
		entry = s.st.MaxOffset(topic, p)
	default:
		if entry, err = s.parts.entryOf(part, off); err != nil {
			return errKafkaStorage
		}
	}
	if err := s.core.CommitOffset(group, topic, p, entry); err != nil {
		return coreCode(err)
	}
	s.exactMu.Lock()
	s.exact[groupPartition{group, topic, p}] = exactOffset{entry: entry, offset: off}
	s.exactMu.Unlock()
	return errNone
}

// groupPartition names a group's committed offset.
type groupPartition struct {
	group, topic string
	partition    int32
}

// exactOffset is a committed Kafka offset and the entry it was stored as.
type exactOffset struct{ entry, offset int64 }

func (s *Server) offsetFetch(req *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	topics := req.Topics
	if topics == nil { // all topics the group committed for
		for topic := range s.core.OffsetTopics(req.Group) {
			t := kmsg.OffsetFetchRequestTopic{Topic: topic}
			if tc, ok := s.core.Topic(topic); ok {
				for q := int32(0); q < tc.ReadQueueNums; q++ {
					t.Partitions = append(t.Partitions, q)
				}
			}
			topics = append(topics, t)
		}
	}
	for _, t := range topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
			rp.Metadata = kmsg.StringPtr("")
			if entry, ok := s.core.ConsumerOffset(req.Group, t.Topic, p, false); ok {
				s.exactMu.Lock()
				e, known := s.exact[groupPartition{req.Group, t.Topic, p}]
				s.exactMu.Unlock()
				if known && e.entry == entry {
					rp.Offset = e.offset
					rt.Partitions = append(rt.Partitions, rp)
					continue
				}
				off, err := s.kafkaOffsetOf(t.Topic, p, entry)
				if err != nil {
					rp.ErrorCode = errKafkaStorage
				} else {
					rp.Offset = off
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// kafkaOffsetOf is the Kafka offset a committed entry stands for: the base
// of the first batch at or after it, or the high watermark.
func (s *Server) kafkaOffsetOf(topic string, p int32, entry int64) (int64, error) {
	part := s.parts.get(topic, p)
	hwm, err := s.parts.highWatermark(part)
	if err != nil {
		return 0, err
	}
	lo, hi := s.st.MinOffset(topic, p), s.st.MaxOffset(topic, p)
	for i := max(entry, lo); i < hi; i++ {
		b, err := s.parts.readEntry(part.key, i)
		if err != nil {
			return 0, err
		}
		if b.ok {
			return b.base, nil
		}
	}
	return hwm, nil
}

// RecordLag is a group's lag on a queue in Kafka records rather than
// entries (one entry holds a whole batch): the high watermark minus the
// Kafka offset the group committed (exact while the broker runs, else the
// base of the batch at its committed entry). ok is false when the entry
// at the committed offset is not a Kafka batch (a RocketMQ queue: its
// entries are its messages) or cannot be read; the caller keeps the
// entry count then. It reads at most two entries (the committed one and,
// when the cached high watermark is stale, the last).
func (s *Server) RecordLag(group, topic string, queueID int32, committedEntry, endEntry int64) (int64, bool) {
	k := queueKey{topic, queueID}
	lo := s.st.MinOffset(topic, queueID)
	entry := max(committedEntry, lo)
	if entry >= endEntry {
		return 0, false
	}
	b, err := s.parts.readEntry(k, entry)
	if err != nil || !b.ok {
		return 0, false
	}
	part := s.parts.get(topic, queueID)
	start, hwm, err := s.partitionBounds(topic, part)
	if err != nil {
		return 0, false
	}
	off := b.base
	s.exactMu.Lock()
	if e, known := s.exact[groupPartition{group, topic, queueID}]; known && e.entry == committedEntry {
		off = e.offset
	}
	s.exactMu.Unlock()
	return max(hwm-max(off, start), 0), true
}
