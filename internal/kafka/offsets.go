package kafka

// OffsetCommit and OffsetFetch over the core's committed offsets, which
// are queue offsets — and Kafka offsets are queue offsets (one entry per
// record), so a Kafka offset is committed as it is, and what disk
// pressure, lag (in records) and RocketMQ consumers of the same group
// read is exact. A commit past the high watermark is stored as it is, as
// Kafka does (a consumer that resumes there gets OFFSET_OUT_OF_RANGE and
// its reset policy; lag is counted from the high watermark). A commit is acknowledged only after the offsets file is
// written durably (core.FlushOffsets). Commit metadata is not kept.
// Offsets are keyed by group name, shared with a RocketMQ group of the
// same name. Offsets a transaction commits (TxnOffsetCommit, txn.go) are
// committed here when it commits; until then OffsetFetch with
// RequireStable answers UNSTABLE_OFFSET_COMMIT for them.

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
			if fenced := s.checkInstance(req.Group, req.InstanceID, req.MemberID); fenced != errNone {
				code = fenced
			}
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
	if err := s.parts.checkFormat(part); err != nil {
		s.log.Error("kafka: offset commit", "topic", topic, "queue_id", p, "err", err)
		return errKafkaStorage
	}
	if off < 0 {
		return errOffsetOutOfRange
	}
	if err := s.core.CommitOffset(group, topic, p, off); err != nil {
		return coreCode(err)
	}
	return errNone
}

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
			if off, ok := s.core.ConsumerOffset(req.Group, t.Topic, p, false); ok {
				rp.Offset = off
			}
			if req.RequireStable && s.txnPendingOffset(req.Group, t.Topic, p) {
				rp.ErrorCode = errUnstableOffsetCommit // an open transaction commits it (txn.go)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
