package kafka

// ListOffsets: -1 latest (the high watermark), -2 earliest (the log start),
// -3 (v7, max timestamp) answered as latest, and a timestamp: the first
// batch whose store time is at or after it (the store's search by time;
// Kafka searches record timestamps, which producers set, so the two agree
// for CreateTime records only up to the producer's clock and batching),
// with that batch's base offset and store time; the high watermark with
// timestamp -1 when every batch is older. Entries of other protocols
// served at their queue offsets (foreign.go) count with their store time.

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (s *Server) listOffsets(req *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			s.listPartition(t.Topic, p, &rp)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *Server) listPartition(topic string, p kmsg.ListOffsetsRequestTopicPartition, rp *kmsg.ListOffsetsResponseTopicPartition) {
	rp.Timestamp, rp.Offset, rp.LeaderEpoch = -1, -1, 0
	if rp.ErrorCode = s.checkRead(topic, p.Partition); rp.ErrorCode != errNone {
		return
	}
	part := s.parts.get(topic, p.Partition)
	start, hwm, err := s.partitionBounds(topic, part)
	if err != nil {
		s.log.Error("kafka: list offsets", "topic", topic, "queue_id", p.Partition, "err", err)
		rp.ErrorCode = errKafkaStorage
		return
	}
	switch ts := p.Timestamp; {
	case ts == -2:
		rp.Offset = start
	case ts < 0:
		rp.Offset = hwm
	default:
		rp.Offset = hwm
		lo, hi := s.st.MinOffset(topic, p.Partition), s.st.MaxOffset(topic, p.Partition)
		for idx := s.st.OffsetByTime(topic, p.Partition, ts); idx >= lo && idx < hi; idx++ {
			b, err := s.parts.readEntry(part.key, idx)
			if err != nil {
				rp.ErrorCode = errKafkaStorage
				return
			}
			if b.ok && b.storeMs >= ts && b.end > start {
				rp.Offset, rp.Timestamp = max(b.base, start), b.storeMs
				break
			}
			if b.ok {
				continue
			}
			if ms, ok, err := s.parts.foreignAt(part, idx); err == nil && ok && ms >= ts {
				rp.Offset, rp.Timestamp = idx, ms // another protocol's entry (foreign.go)
				break
			}
		}
	}
	if req := p; req.MaxNumOffsets > 0 { // v0 only; kept for completeness
		rp.OldStyleOffsets = []int64{rp.Offset}
	}
}
