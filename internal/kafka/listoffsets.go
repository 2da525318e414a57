package kafka

// ListOffsets: -1 latest (the high watermark; with isolation_level
// read_committed the last stable offset), -2 earliest (the log start),
// -3 (v7, max timestamp) answered as latest, and a timestamp: as Kafka,
// the offset and timestamp of the first record in log order whose
// timestamp (the producer's CreateTime, or the batch's LogAppendTime) is
// at or after it; the high watermark with timestamp -1 when none is. The
// scan starts at the first entry stored at or after the target less
// listOffsetsClockLead (the store's index by time), so a record stamped
// more than that ahead of the broker's clock is found only from where
// its store time puts it. A batch whose maxTimestamp is older is skipped
// from its header; messages of other protocols count with the timestamp
// a fetch shows them with. A compacted partition's copy is searched
// first, the store from its cleaned point after (compact.go).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/translate"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// listOffsetsClockLead is how far ahead of the broker's clock a
// producer's record timestamps may be and still be found by a search by
// time: the scan starts at the first entry stored at or after the target
// less this lead.
const listOffsetsClockLead = time.Minute

// firstAtOrAfter looks at the record at entry idx of k for the first
// Kafka record at or after entry from whose timestamp is at least ts. It
// returns that record's offset and timestamp (found), and the entry after
// the stored record (where the search goes on otherwise).
func (ps *partitions) firstAtOrAfter(k queueKey, idx, from, ts int64) (off, recTs, end int64, found bool, err error) {
	r, err := ps.st.GetMessage(k.topic, k.queueID, idx, 1, 1, nil)
	if err != nil {
		return 0, 0, 0, false, err
	}
	defer r.Release()
	if r.Status != store.Found || len(r.Records) == 0 {
		return 0, 0, 0, false, fmt.Errorf("kafka: entry %d of %s/%d: %v", idx, k.topic, k.queueID, r.Status)
	}
	rec := r.Records[0]
	b, err := kafkaView(rec, k)
	switch {
	case err != nil:
		return 0, 0, 0, false, err
	case b.old:
		return 0, 0, 0, false, errOldFormat
	case !b.ok: // another protocol's message: one entry, converted as a fetch shows it
		kr, err := translate.KafkaRecordOf(rec, idx, translate.DefaultLimit)
		if err != nil {
			return 0, 0, 0, false, err
		}
		return idx, kr.Timestamp, idx + 1, kr.Timestamp >= ts, nil
	}
	end = max(b.end, idx+1)
	body := record.Envelope(rec).Body()
	if maxTs := int64(binary.BigEndian.Uint64(body[35:])); maxTs < ts {
		return 0, 0, end, false, nil // no record of the batch is that late
	}
	err = translate.EachKafkaRecord(body, translate.DefaultLimit, func(kr *translate.KafkaRecord) error {
		if kr.Offset >= from && kr.Timestamp >= ts {
			off, recTs, found = kr.Offset, kr.Timestamp, true
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return 0, 0, 0, false, err
	}
	return off, recTs, end, found, nil
}

var errFound = errors.New("kafka: found")

func (s *Server) listOffsets(req *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	cs := s.cluster(false)
	epoch := s.localEpoch()
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			q, code := s.localQueue(cs, t.Topic, p.Partition)
			if code == errNone && req.Version >= 4 { // CurrentLeaderEpoch is in the request
				code = checkLeaderEpoch(p.CurrentLeaderEpoch, epoch)
			}
			if code == errNone && req.IsolationLevel == 1 && !s.servesCommitted() {
				code = errNotLeaderOrFollower // txnmarker.go
			}
			if code != errNone {
				rp.ErrorCode, rp.Timestamp, rp.Offset, rp.LeaderEpoch = code, -1, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			p.Partition = q // this broker's queue from here on
			s.listPartition(t.Topic, p, req.IsolationLevel == 1, &rp)
			rp.Partition = t.Partitions[len(rt.Partitions)].Partition // the client's number
			if g := cs.groups[s.cfg.Group]; g != nil && rp.ErrorCode == errNone {
				rp.LeaderEpoch = g.epoch
				if epoch >= 0 {
					rp.LeaderEpoch = epoch
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *Server) listPartition(topic string, p kmsg.ListOffsetsRequestTopicPartition, committed bool, rp *kmsg.ListOffsetsResponseTopicPartition) {
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
	if committed { // read_committed: the last stable offset (txnmarker.go)
		hwm = s.lastStable(part, hwm)
	}
	switch ts := p.Timestamp; {
	case ts == -2:
		rp.Offset = start
	case ts < 0:
		rp.Offset = hwm
	default:
		rp.Offset = hwm
		lo := max(s.st.OffsetByTime(topic, p.Partition, ts-listOffsetsClockLead.Milliseconds()), start)
		off, recTs, cleaned, found, err := s.compact.byTime(part.key, start, ts) // compact.go: the copy first
		if err != nil {
			s.log.Error("kafka: list offsets by time", "topic", topic, "queue_id", p.Partition, "err", err)
			rp.ErrorCode = errKafkaStorage
			return
		}
		if found {
			rp.Offset, rp.Timestamp = off, recTs
			break
		}
		for idx := max(lo, cleaned); idx < hwm; {
			off, recTs, end, found, err := s.parts.firstAtOrAfter(part.key, idx, start, ts)
			if err != nil {
				s.log.Error("kafka: list offsets by time", "topic", topic, "queue_id", p.Partition, "offset", idx, "err", err)
				rp.ErrorCode = errKafkaStorage
				return
			}
			if found {
				rp.Offset, rp.Timestamp = off, recTs
				break
			}
			idx = end
		}
	}
	if req := p; req.MaxNumOffsets > 0 { // v0 only; kept for completeness
		rp.OldStyleOffsets = []int64{rp.Offset}
	}
}
