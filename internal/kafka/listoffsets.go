package kafka

// ListOffsets: -1 latest (the high watermark), -2 earliest (the log start),
// -3 (v7, max timestamp) answered as latest, and a timestamp: the first
// batch whose store time is at or after it (the store's search by time;
// Kafka searches record timestamps, which producers set, so the two agree
// for CreateTime records only up to the producer's clock and batching),
// with that batch's base offset and store time; the high watermark with
// timestamp -1 when every batch is older. Messages of other protocols
// count with their store time, at their queue offsets.

import (
	"fmt"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/translate"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// storeTimeAt is the store time of the record at entry idx of k, the
// first of its entries and the entry after its last.
func (ps *partitions) storeTimeAt(k queueKey, idx int64) (ms, first, end int64, err error) {
	r, err := ps.st.GetMessage(k.topic, k.queueID, idx, 1, 1, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	defer r.Release()
	if r.Status != store.Found || len(r.Records) == 0 {
		return 0, 0, 0, fmt.Errorf("kafka: entry %d of %s/%d: %v", idx, k.topic, k.queueID, r.Status)
	}
	rec := r.Records[0]
	b, err := kafkaView(rec, k)
	switch {
	case err != nil:
		return 0, 0, 0, err
	case b.old:
		return 0, 0, 0, errOldFormat
	case b.ok:
		return b.storeMs, b.base, max(b.end, idx+1), nil
	}
	return translate.StoreTimestamp(rec), idx, idx + 1, nil
}

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
		for idx := max(s.st.OffsetByTime(topic, p.Partition, ts), lo); idx < hi; {
			ms, first, end, err := s.parts.storeTimeAt(part.key, idx)
			if err != nil {
				rp.ErrorCode = errKafkaStorage
				return
			}
			if ms >= ts {
				rp.Offset, rp.Timestamp = max(first, start), ms
				break
			}
			idx = end
		}
	}
	if req := p; req.MaxNumOffsets > 0 { // v0 only; kept for completeness
		rp.OldStyleOffsets = []int64{rp.Offset}
	}
}
