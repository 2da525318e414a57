package kafka

// Produce: every partition's batch is validated (batch.go) and appended
// as one Kafka-batch record (record.KafkaBatch with
// record.FlagEntryPerMessage: one ConsumeQueue entry per record) exactly
// as received but for the base offset — the first of the queue offsets
// the store assigns it, patched in as it is appended — and the leader
// epoch, which the CRC does not cover: compressed batches stay
// compressed. The partition's append lock covers only the sequence check
// and the append, never a flush.
//
//	acks=-1 (all)  answered when the store's Confirmed watermark passes
//	               every appended batch: under SYNC_FLUSH after the
//	               fdatasync (group commit), and the replicated watermark
//	               once replication exists; ASYNC_FLUSH after the append;
//	               and then Visible (dispatched: the high watermark covers
//	               it, as Kafka answers acks=all once its high watermark
//	               passes the batch)
//	acks=1         answered after the append
//	acks=0         no response at all
//
// A topic whose compression.type names a codec has every batch in
// another codec recompressed to it before it is stored (records
// decompressed up to translate.DefaultLimit, or the topic's
// max.message.bytes if larger; the header kept but for the codec bits and
// the length, the CRC recomputed), as a Kafka broker does; its
// max.message.bytes then applies to the recompressed batch. With
// "producer", the default, batches are stored as produced.
//
// A topic with message.timestamp.type=LogAppendTime has each batch
// stamped as it is appended: the LogAppendTime attribute bit set and
// maxTimestamp the record's store time, the batch CRC recomputed (it
// covers both), as a Kafka broker does; consumers then see the append
// time as every record's timestamp, and the response carries it.
//
// Produce v0-v2 carry message sets of magic 0 or 1: each partition's set
// is upgraded to one uncompressed batch (translate.UpgradeMessageSet, as
// a Kafka broker up-converts old formats) and then stored like any batch.
//
// A timeout waiting for Confirmed answers REQUEST_TIMED_OUT (the batch is
// written and may still become durable and visible: the producer retries;
// an idempotent producer's retry is recognized, idempotence.go, another's
// is stored again).

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/store/watermark"
	"github.com/keelmq/keel/internal/translate"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (s *Server) produce(req *kmsg.ProduceRequest) kmsg.Response {
	start := time.Now()
	resp := s.produceAnswer(req)
	s.observeProduce(req, resp, start)
	if failedPartition(resp) {
		s.cfg.Traffic.Error()
	}
	if req.Acks == 0 {
		return nil
	}
	return resp
}

// produceAnswer stores req's batches and builds its answer (also for
// acks=0, which is not sent).
func (s *Server) produceAnswer(req *kmsg.ProduceRequest) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	if req.Acks != 0 && req.Acks != 1 && req.Acks != -1 {
		return s.produceAll(req, resp, errInvalidRequiredAcks, "acks must be -1, 0 or 1")
	}
	var until int64 = -1 // the Confirmed offset every appended batch needs
	cs := s.cluster(false)
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			q, code := s.localQueue(cs, t.Topic, p.Partition)
			if code != errNone {
				rp.ErrorCode, rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = code, -1, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			p.Partition = q // this broker's queue from here on
			end := s.producePartition(t.Topic, p, req.Version, req.TransactionID, &rp)
			if end > until {
				until = end
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if req.Acks == -1 && until >= 0 {
		if code := s.waitConfirmed(until, req.TimeoutMillis); code != errNone {
			if !s.leads() {
				// Replaced while waiting: not confirmed here, and maybe
				// never; the client retries on the new master (its
				// idempotent sequence tells a copy that did get there).
				code = errNotLeaderOrFollower
			}
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					if rp := &resp.Topics[i].Partitions[j]; rp.ErrorCode == errNone {
						rp.ErrorCode, rp.BaseOffset = code, -1
					}
				}
			}
		}
	}
	return resp
}

// producePartition stores one partition's batch and fills rp; it returns
// the CommitLog offset the batch ends at (-1 if not stored).
func (s *Server) producePartition(topic string, p kmsg.ProduceRequestTopicPartition, version int16, txnID *string, rp *kmsg.ProduceResponseTopicPartition) int64 {
	rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
	fail := func(code int16, msg string) int64 {
		rp.ErrorCode, rp.ErrorMessage = code, kmsg.StringPtr(msg)
		return -1
	}
	if _, ok := s.core.Topic(topic); !ok {
		if _, _, err := s.autoCreate(topic); err != nil {
			return fail(coreCode(err), err.Error())
		}
	}
	qid, err := s.core.CheckSend(topic, core.DefaultTopic, 0, p.Partition, 0) // the size is checked below, against the topic's limit
	if err != nil {
		if errors.Is(err, core.ErrInvalidArgument) && p.Partition >= 0 {
			if _, ok := s.core.Topic(topic); ok {
				return fail(errUnknownTopicOrPartition, err.Error())
			}
		}
		return fail(coreCode(err), err.Error())
	}
	maxBytes, logAppend, codec, compacted := s.cfg.MaxBatchBytes, false, -1, false
	before, after := int64(math.MaxInt64), int64(math.MaxInt64)
	if tc, ok := s.core.Topic(topic); ok {
		maxBytes = s.maxBatchBytes(tc)
		v, _ := s.topicValue(tc, "message.timestamp.type")
		logAppend = v == "LogAppendTime"
		v, _ = s.topicValue(tc, "compression.type")
		codec = topicCodec(v)
		before, after = s.timestampBounds(tc)
		compacted = isCompacted(tc)
	}
	if version < 3 { // a message set of magic 0 or 1: upgraded to a batch, as Kafka does
		up, err := translate.UpgradeMessageSet(p.Records, maxBytes)
		if err != nil {
			if errors.Is(err, translate.ErrTooLarge) {
				return fail(errMessageTooLarge, err.Error())
			}
			return fail(errCorruptMessage, err.Error())
		}
		p.Records = up
	}
	limit := maxBytes
	if codec >= 0 { // recompressed below: the limit applies to the batch as stored
		limit = max(s.cfg.MaxRequestBytes, maxBytes)
	}
	h, berr := checkBatch(p.Records, limit, version)
	if berr != nil {
		return fail(berr.code, berr.msg)
	}
	if codec >= 0 && translate.KafkaBatchCodec(p.Records) != codec {
		re, err := translate.RecompressKafkaBatch(p.Records, codec, max(maxBytes, translate.DefaultLimit))
		switch {
		case errors.Is(err, translate.ErrTooLarge):
			return fail(errMessageTooLarge, err.Error())
		case err != nil:
			return fail(errCorruptMessage, err.Error())
		}
		p.Records = re
	}
	if !logAppend && (before < math.MaxInt64 || after < math.MaxInt64) {
		if msg := checkTimestamps(p.Records, s.parts.now().UnixMilli(), before, after, max(maxBytes, translate.DefaultLimit)); msg != "" {
			return fail(errInvalidTimestamp, msg)
		}
	}
	if compacted && h.attributes&attrTransactional != 0 {
		// The cleaner (compact.go) keeps records without regard to
		// their transaction: an aborted one could outlive its marker.
		return fail(errPolicyViolation, "topic "+topic+" is compacted (cleanup.policy=compact): it takes no transactional records")
	}
	if compacted { // compact.go: every record needs a key
		if msg := keylessRecord(p.Records, topic, p.Partition, max(maxBytes, translate.DefaultLimit)); msg != "" {
			return fail(errInvalidRecord, msg)
		}
	}
	if len(p.Records) > maxBytes {
		return fail(errMessageTooLarge, "record batch of "+strconv.Itoa(len(p.Records))+" bytes as stored exceeds the topic's max.message.bytes "+strconv.Itoa(maxBytes))
	}
	part := s.parts.get(topic, qid)
	if err := s.parts.checkFormat(part); err != nil {
		s.log.Error("kafka: produce", "topic", topic, "queue_id", qid, "err", err)
		return fail(errKafkaStorage, err.Error())
	}
	rec, err := record.AppendEnvelopeFlags(nil, record.KafkaBatch, record.FlagEntryPerMessage, h.records,
		[]record.Dest{{Topic: topic, QueueID: qid}}, p.Records) // a copy: the request's buffer is not patched
	if err != nil {
		return fail(errInvalidRecord, err.Error())
	}
	part.appendMu.Lock()
	if err := s.parts.loadProducers(part); errors.Is(err, errProducersNotLoaded) {
		if h.producerID >= 0 { // no window to check its sequence against yet
			part.appendMu.Unlock()
			return fail(errNotEnoughReplicas, err.Error())
		}
	} else if err != nil {
		part.appendMu.Unlock()
		s.log.Error("kafka: produce: producer state", "topic", topic, "queue_id", qid, "err", err)
		return fail(errKafkaStorage, err.Error())
	}
	if h.attributes&attrTransactional != 0 { // its transaction must be open with this partition (txn.go)
		if code, msg := s.txnProduceCheck(txnID, h.producerID, h.epoch, part.key); code != errNone {
			part.appendMu.Unlock()
			return fail(code, msg)
		}
	}
	if h.producerID >= 0 {
		dup, code := part.checkSequence(h, s.parts.now().UnixMilli(), s.parts.lim)
		if code != errNone {
			part.appendMu.Unlock()
			return fail(code, "sequence or epoch refused for producer "+itoa(h.producerID))
		}
		if dup != nil {
			part.appendMu.Unlock()
			rp.BaseOffset, rp.LogStartOffset = dup.base, s.logStartOf(topic, part)
			return dup.end // a retry: answered with the original, once it is confirmed
		}
	}
	// The store assigns the batch's n queue offsets under its append lock;
	// the first is its base offset, written into the body before the
	// record is sealed (the batch CRC does not cover it).
	base, appendMs := int64(-1), int64(-1)
	epoch := s.writeEpoch()
	r, _, end := s.st.AppendRecordPatched(s.ctx, rec, func(body []byte, _ int, first, storeMs int64) {
		assignBase(body, first, epoch)
		base = first
		if logAppend { // message.timestamp.type=LogAppendTime: the store time, as Kafka stamps it
			stampLogAppendTime(body, storeMs)
			appendMs = storeMs
		}
	})
	if r.Status == store.PutOK && h.producerID >= 0 {
		part.recordSequence(h.producerID, h.epoch, seqBatch{first: h.baseSequence, last: h.baseSequence + h.lastOffsetDelta, base: base, end: end}, s.parts.now().UnixMilli(), s.parts.lim)
	}
	part.appendMu.Unlock()
	if r.Status != store.PutOK {
		s.log.Warn("kafka: produce refused by the store", "topic", topic, "queue_id", qid, "status", r.Status, "err", r.Err)
		code := errKafkaStorage
		switch {
		case r.Status == store.PutMessageIllegal:
			code = errMessageTooLarge
		case !s.leads():
			code = errNotLeaderOrFollower // replaced while the batch came in
		}
		msg := r.Status.String()
		if r.Err != nil {
			msg = r.Err.Error()
		}
		return fail(code, msg)
	}
	rp.BaseOffset, rp.LogAppendTime = base, appendMs
	rp.LogStartOffset = s.logStartOf(topic, part)
	return end
}

// logStartOf is the partition's log start for a Produce answer (-1 if it
// cannot be read).
func (s *Server) logStartOf(topic string, part *partition) int64 {
	start, _, err := s.partitionBounds(topic, part)
	if err != nil {
		return -1
	}
	return start
}

// waitConfirmed waits until the Confirmed watermark reaches end, at most
// the request's timeout.
func (s *Server) waitConfirmed(end int64, timeoutMs int32) int16 {
	timeout := time.Duration(timeoutMs) * time.Millisecond
	if timeout <= 0 || timeout > s.cfg.MaxWait {
		timeout = s.cfg.MaxWait
	}
	start := time.Now()
	err := s.st.WaitFor(s.ctx, store.Confirmed, end, timeout)
	if err == nil {
		// As in Kafka, where acks=all answers once the high watermark
		// passes the batch: a consumer told the offset can fetch it.
		err = s.st.WaitFor(s.ctx, store.Visible, end, max(timeout-time.Since(start), time.Millisecond))
	}
	switch {
	case err == nil:
		return errNone
	case errors.Is(err, watermark.ErrTimeout), errors.Is(err, context.Canceled):
		return errRequestTimedOut
	}
	s.log.Error("kafka: produce not confirmed", "err", err)
	return errKafkaStorage
}

// produceAll answers every partition of req with code.
func (s *Server) produceAll(req *kmsg.ProduceRequest, resp *kmsg.ProduceResponse, code int16, msg string) *kmsg.ProduceResponse {
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.ErrorMessage = p.Partition, code, kmsg.StringPtr(msg)
			rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// timestampBounds is how far before and after the broker's clock a
// record's CreateTime may be on tc (math.MaxInt64: unbounded), as Kafka
// reads message.timestamp.before.max.ms and after.max.ms, each bounded
// by the older message.timestamp.difference.max.ms too.
func (s *Server) timestampBounds(tc core.TopicConfig) (before, after int64) {
	diff, _ := s.topicLong(tc, "message.timestamp.difference.max.ms")
	before, _ = s.topicLong(tc, "message.timestamp.before.max.ms")
	after, _ = s.topicLong(tc, "message.timestamp.after.max.ms")
	return min(before, diff), min(after, diff)
}

// checkTimestamps returns why a record of batch b has a CreateTime more
// than before ms before now or after ms after it, "" if none has (the
// records decompressed up to limit bytes).
func checkTimestamps(b []byte, now, before, after int64, limit int) string {
	msg := ""
	err := translate.EachKafkaRecord(b, limit, func(r *translate.KafkaRecord) error {
		switch {
		case r.Timestamp < now && now-r.Timestamp > before:
			msg = "record timestamp " + itoa(r.Timestamp) + " is more than " + itoa(before) + " ms before the broker's clock (" + itoa(now) + "; message.timestamp.before.max.ms)"
		case r.Timestamp > now && r.Timestamp-now > after:
			msg = "record timestamp " + itoa(r.Timestamp) + " is more than " + itoa(after) + " ms after the broker's clock (" + itoa(now) + "; message.timestamp.after.max.ms)"
		default:
			return nil
		}
		return errFound
	})
	if err != nil && msg == "" {
		return "records not readable to check their timestamps: " + err.Error()
	}
	return msg
}

// topicCodec is the codec compression.type asks batches to be stored in,
// -1 for producer (as produced).
func topicCodec(v string) int {
	switch v {
	case "uncompressed":
		return translate.CodecNone
	case "gzip":
		return translate.CodecGzip
	case "snappy":
		return translate.CodecSnappy
	case "lz4":
		return translate.CodecLZ4
	case "zstd":
		return translate.CodecZstd
	}
	return -1
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// failedPartition reports whether resp answers a partition with an error.
func failedPartition(resp *kmsg.ProduceResponse) bool {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != errNone {
				return true
			}
		}
	}
	return false
}
