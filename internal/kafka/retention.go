package kafka

// Per-topic retention on the shared CommitLog. A topic's retention.ms and
// retention.bytes, when set on it, are applied every
// RetentionCheckInterval by moving its partitions' log starts, the one
// DeleteRecords moves (kafka.logStart.<partition> in the topic's
// attributes):
//
//	retention.ms     the log start moves past each batch, oldest first,
//	                 whose maxTimestamp (the producer's CreateTime, or the
//	                 LogAppendTime stamped at append; a batch without
//	                 timestamps counts by its store time; a message of
//	                 another protocol by the timestamp a fetch shows it
//	                 with) is older than now less retention.ms; the first
//	                 younger batch stops it, as Kafka's segment-by-segment
//	                 deletion stops at the first segment whose largest
//	                 timestamp is young enough. -1: never.
//	retention.bytes  the log start moves past the oldest records while the
//	                 partition holds at least retention.bytes without
//	                 them (as Kafka drops a segment while what is left is
//	                 at least retention.bytes), counted in stored bytes:
//	                 each CommitLog record (the batch and its envelope)
//	                 from the log start to the high watermark. -1: none.
//
// A compacted topic (cleanup.policy=compact,delete) is not retained here:
// its cleaner applies them to its compacted copy (compact.go).
//
// A topic that sets neither keeps the broker's retention alone: the
// store's age retention (fileReservedTime, whole segments) and disk
// pressure. The log start is written durably (topics.json) before
// anything relies on it: Fetch, ListOffsets and the holds below read the
// topic's stored attributes, so a crash leaves either the old start or
// the new one, and the next round redoes what was lost.
//
// The CommitLog is shared: records below a log start stay on disk until
// the store deletes their segment. A topic whose retention.ms is -1 or
// longer than fileReservedTime holds its partitions' log starts from the
// store's age retention (store.SetAgeHolds), which then keeps the
// segment a log start points into and every later one (other topics'
// records in them too). Disk pressure ignores these holds: at
// diskMaxUsedSpaceRatio the store deletes the oldest segments as
// diskPressureDelete decides for every queue (consumer groups' committed
// offsets), so a topic's long retention never keeps a segment pressure
// would delete, nor is it why writes are refused for a full disk; what
// pressure deletes moves the store's min offset, and with it the Kafka
// log start.
//
// RocketMQ and AMQP consumers of the topic read what the store keeps: a
// topic's shorter retention hides records from Kafka clients only
// (RocketMQ consumers read them until their segment goes), its longer
// retention keeps them for everyone.

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/translate"
)

// maxRetentionScan bounds the records one pass reads per partition to
// find where retention.ms moves its log start; a pass cut short writes
// the log starts it found and the round goes on with another, so a large
// backlog is worked through in steps whose progress is durable.
var maxRetentionScan = 10_000 // a variable for tests

// runRetention applies retention every RetentionCheckInterval until the
// server closes.
func (s *Server) runRetention() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.RetentionCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.applyRetention(s.parts.now())
			s.retentionRounds.Add(1)
		}
	}
}

// topicRetention is what a topic sets: retention.ms (-1: none set or
// infinite) and retention.bytes (-1: none).
func (s *Server) topicRetention(tc core.TopicConfig) (ms, bytes int64) {
	ms, msSet := s.topicLong(tc, "retention.ms")
	if !msSet {
		ms = -1
	}
	bytes, _ = s.topicLong(tc, "retention.bytes")
	return ms, bytes
}

// applyRetention is one round over every topic that sets a retention.
func (s *Server) applyRetention(now time.Time) {
	for _, tc := range s.core.Topics() {
		ms, bytes := s.topicRetention(tc)
		if ms < 0 && bytes < 0 || isCompacted(tc) { // compact,delete: the cleaner applies them (compact.go)
			continue
		}
		for more := true; more && s.ctx.Err() == nil; {
			more = s.retainTopic(tc.TopicName, ms, bytes, now)
		}
	}
}

// retainTopic is one pass over a topic's partitions; it reports whether
// a partition's scan was cut short (another pass goes on from the new log
// starts).
func (s *Server) retainTopic(topic string, ms, bytes int64, now time.Time) (more bool) {
	tc, ok := s.core.Topic(topic)
	if !ok {
		return false
	}
	moves := map[int32]int64{}
	for p := range tc.QueueNums() {
		part := s.parts.get(topic, p)
		start, hwm, err := s.partitionBounds(topic, part)
		if err != nil || start >= hwm {
			continue
		}
		to, cut, err := s.retainFrom(part, start, hwm, ms, bytes, now)
		if err != nil {
			s.log.Error("kafka: retention: partition not read; its log start stays", "topic", topic, "partition", p, "err", err)
			continue
		}
		if to > start {
			moves[p] = to
			more = more || cut
		}
	}
	if len(moves) > 0 && !s.moveLogStarts(topic, moves) {
		return false
	}
	return more
}

// moveLogStarts writes the partitions' new log starts durably (never
// lowering one DeleteRecords set meanwhile, never past the high
// watermark); false if they could not be written.
func (s *Server) moveLogStarts(topic string, moves map[int32]int64) bool {
	s.topicMu.Lock()
	defer s.topicMu.Unlock()
	tc, ok := s.core.Topic(topic)
	if !ok {
		return false
	}
	attrs := make(map[string]string, len(tc.Attributes)+len(moves))
	for k, v := range tc.Attributes {
		attrs[k] = v
	}
	changed := false
	for p, to := range moves {
		to = min(to, s.st.MaxOffset(topic, p))
		if p < tc.QueueNums() && to > deletedBelow(tc, p) {
			attrs[logStartAttr(p)], changed = itoa(to), true
		}
	}
	if !changed {
		return false
	}
	tc.Attributes = attrs
	if err := s.putTopic(tc); err != nil {
		s.log.Error("kafka: retention: log starts not written; retried next round", "topic", topic, "err", err)
		return false
	}
	s.log.Info("kafka: retention moved log starts", "topic", topic, "partitions", len(moves))
	return true
}

// retainFrom is where a partition's log start goes for retention ms and
// bytes (-1: none), from start (< hwm); cut says the scan by time
// stopped at maxRetentionScan records, not at a young one.
func (s *Server) retainFrom(p *partition, start, hwm, ms, bytes int64, now time.Time) (to int64, cut bool, err error) {
	to = start
	if ms >= 0 {
		cutoff := now.UnixMilli() - ms
		idx, n := start, 0
		for ; idx < hwm && n < maxRetentionScan; n++ {
			ts, end, err := s.parts.entryTime(p.key, idx)
			if err != nil {
				return start, false, err
			}
			if ts >= cutoff {
				break
			}
			idx, to = end, min(end, hwm)
		}
		cut = n == maxRetentionScan && idx < hwm
	}
	if bytes >= 0 {
		b, err := s.parts.bytesRetainFrom(p, start, hwm, bytes)
		if err != nil {
			return start, false, err
		}
		to = max(to, b)
	}
	return to, cut, nil
}

// entryTime is the timestamp retention.ms judges the record at entry idx
// by, and the entry after the record.
func (ps *partitions) entryTime(k queueKey, idx int64) (ts, end int64, err error) {
	r, err := ps.st.GetMessage(k.topic, k.queueID, idx, 1, 1, nil)
	if err != nil {
		return 0, 0, err
	}
	defer r.Release()
	if (r.Status == store.NoMatchedMessage || r.Status == store.OffsetTooSmall) && r.NextOffset > idx {
		return math.MinInt64, r.NextOffset, nil // entries of removed records (repair holes, or retention meanwhile): nothing to keep
	}
	if r.Status != store.Found || len(r.Records) == 0 {
		return 0, 0, fmt.Errorf("kafka: entry %d of %s/%d: %v", idx, k.topic, k.queueID, r.Status)
	}
	rec := r.Records[0]
	b, err := kafkaView(rec, k)
	switch {
	case err != nil:
		return 0, 0, err
	case b.old:
		return 0, 0, errOldFormat
	case !b.ok:
		kr, err := translate.KafkaRecordOf(rec, idx, translate.DefaultLimit)
		if err != nil {
			return 0, 0, err
		}
		return kr.Timestamp, idx + 1, nil
	}
	ts = b.storeMs
	if maxTs := int64(binary.BigEndian.Uint64(record.Envelope(rec).Body()[35:])); maxTs >= 0 {
		ts = maxTs
	}
	return ts, max(b.end, idx+1), nil
}

// sizeCache is a partition's stored bytes from one entry to another, kept
// by the retention goroutine between rounds so that a round reads only
// the entries added since.
type sizeCache struct {
	from, to int64 // entries [from, to)
	bytes    int64
	lastPhys int64 // the record of entry to-1
}

// partitionBytes is the bytes of the records with entries in [start,
// hwm).
func (ps *partitions) partitionBytes(p *partition, start, hwm int64) (int64, error) {
	c := &p.size
	if c.from != start || c.to > hwm || c.to < start {
		*c = sizeCache{from: start, to: start, lastPhys: -1}
	}
	var buf [256]store.QueueEntry
	for c.to < hwm {
		n, err := ps.st.QueueEntries(p.key.topic, p.key.queueID, c.to, buf[:min(int64(len(buf)), hwm-c.to)])
		if err != nil {
			*c = sizeCache{}
			return 0, err
		}
		if n == 0 {
			break
		}
		for _, e := range buf[:n] {
			if e.PhysOffset != c.lastPhys {
				c.bytes += int64(e.Size)
				c.lastPhys = e.PhysOffset
			}
		}
		c.to += int64(n)
	}
	return c.bytes, nil
}

// bytesRetainFrom is where retention.bytes moves a partition's log start:
// past its oldest records while what is left without each is still at
// least limit bytes.
func (ps *partitions) bytesRetainFrom(p *partition, start, hwm, limit int64) (int64, error) {
	total, err := ps.partitionBytes(p, start, hwm)
	if err != nil || total <= limit {
		return start, err
	}
	var buf [256]store.QueueEntry
	to, lastPhys, dropping := start, int64(-1), false
	for idx := start; idx < hwm; {
		n, err := ps.st.QueueEntries(p.key.topic, p.key.queueID, idx, buf[:min(int64(len(buf)), hwm-idx)])
		if err != nil {
			return start, err
		}
		if n == 0 {
			break
		}
		for i, e := range buf[:n] {
			if e.PhysOffset == lastPhys {
				continue // another entry of the record being judged
			}
			lastPhys = e.PhysOffset
			if dropping {
				to = idx + int64(i) // the record before goes: the start is this one's first entry
			}
			if total-int64(e.Size) < limit {
				return to, nil
			}
			total -= int64(e.Size)
			dropping = true
		}
		idx += int64(n)
	}
	if dropping {
		to = hwm
	}
	return to, nil
}

// ageHolds is the store's age-hold hook: the log start of every partition
// of a topic retained longer than the broker's fileReservedTime (or
// forever), so that the store's age retention keeps what the topic still
// retains.
func (s *Server) ageHolds() store.QueueHolds {
	var out store.QueueHolds
	for _, tc := range s.core.Topics() {
		ms, _ := s.topicLong(tc, "retention.ms")
		if _, set := tc.Attributes[configAttr("retention.ms")]; !set || ms >= 0 && ms <= s.cfg.RetentionMs {
			continue
		}
		if out == nil {
			out = store.QueueHolds{}
		}
		byID := make(map[int32]int64, tc.QueueNums())
		for p := range tc.QueueNums() {
			byID[p] = deletedBelow(tc, p) // the store holds from its own min offset when that is later
		}
		out[tc.TopicName] = byID
	}
	return s.compact.holdsInto(out) // compacted topics: from their cleaned points
}
