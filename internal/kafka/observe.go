package kafka

// Observation hooks for metrics, as the RocketMQ door's (broker.Observer):
// the door imports no metrics library. Config.Traffic counts connections,
// requests, errors and bytes; Config.Observer is told of every produced
// partition and every fetched one that delivered records. Observer methods
// run on the connection's goroutine and must be cheap and never block.

import (
	"encoding/binary"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Observer receives the door's produce and delivery events.
type Observer interface {
	// OnSend reports one partition of a Produce request: its topic, the
	// records stored (0 unless result is SUCCESS), the bytes of its record
	// batch, the result (SUCCESS, else the Kafka error's name) and the
	// time from receipt to answer.
	OnSend(topic string, msgs, bytes int, result string, d time.Duration)
	// OnDeliver reports the records a Fetch delivered from a topic (at or
	// after the fetch offset; a batch may begin before it).
	OnDeliver(topic string, msgs int)
}

// errorNames are the names of the codes this door answers (Errors.java).
var errorNames = map[int16]string{
	errNone: "SUCCESS", errUnknownServer: "UNKNOWN_SERVER_ERROR", errOffsetOutOfRange: "OFFSET_OUT_OF_RANGE",
	errCorruptMessage: "CORRUPT_MESSAGE", errUnknownTopicOrPartition: "UNKNOWN_TOPIC_OR_PARTITION",
	errRequestTimedOut: "REQUEST_TIMED_OUT", errMessageTooLarge: "MESSAGE_TOO_LARGE", errInvalidTopic: "INVALID_TOPIC_EXCEPTION",
	errNotEnoughReplicas: "NOT_ENOUGH_REPLICAS", errInvalidRequiredAcks: "INVALID_REQUIRED_ACKS",
	errTopicAuthorization: "TOPIC_AUTHORIZATION_FAILED", errUnsupportedVersion: "UNSUPPORTED_VERSION",
	errInvalidRequest: "INVALID_REQUEST", errPolicyViolation: "POLICY_VIOLATION", errKafkaStorage: "KAFKA_STORAGE_ERROR",
	errInvalidRecord: "INVALID_RECORD",
}

// errorName is code's name, or the number for one this door does not use.
func errorName(code int16) string {
	if n, ok := errorNames[code]; ok {
		return n
	}
	return "ERROR_" + strconv.Itoa(int(code))
}

// observeProduce reports every partition of req, answered with resp
// (built in req's order, also for acks=0).
func (s *Server) observeProduce(req *kmsg.ProduceRequest, resp *kmsg.ProduceResponse, start time.Time) {
	o := s.cfg.Observer
	if o == nil {
		return
	}
	d := time.Since(start)
	for ti, t := range req.Topics {
		if ti >= len(resp.Topics) {
			return
		}
		for pi, p := range t.Partitions {
			if pi >= len(resp.Topics[ti].Partitions) {
				break
			}
			code, msgs := resp.Topics[ti].Partitions[pi].ErrorCode, 0
			if code == errNone {
				msgs = deliveredRecords(p.Records, 0) // a produced batch's base offset is 0
			}
			o.OnSend(t.Topic, msgs, len(p.Records), errorName(code), d)
		}
	}
}

// observeFetch reports the records resp delivers, per topic.
func (s *Server) observeFetch(req *kmsg.FetchRequest, resp *kmsg.FetchResponse) {
	o := s.cfg.Observer
	if o == nil {
		return
	}
	for ti, t := range resp.Topics {
		n := 0
		for pi, rp := range t.Partitions {
			if len(rp.RecordBatches) == 0 || ti >= len(req.Topics) || pi >= len(req.Topics[ti].Partitions) {
				continue
			}
			n += deliveredRecords(rp.RecordBatches, req.Topics[ti].Partitions[pi].FetchOffset)
		}
		if n > 0 {
			o.OnDeliver(t.Topic, n)
		}
	}
}

// deliveredRecords counts the records of the batches (RecordBatch v2
// headers: baseOffset at 0, batchLength at 8, lastOffsetDelta at 23) at
// or after offset from: a partition's offsets are dense, one per record.
func deliveredRecords(batches []byte, from int64) int {
	n := 0
	for len(batches) >= 27 {
		base := int64(binary.BigEndian.Uint64(batches[0:8]))
		size := int(int32(binary.BigEndian.Uint32(batches[8:12])))
		last := base + int64(int32(binary.BigEndian.Uint32(batches[23:27])))
		if first := max(base, from); last >= first {
			n += int(last - first + 1)
		}
		if size <= 0 || 12+size > len(batches) {
			break
		}
		batches = batches[12+size:]
	}
	return n
}
