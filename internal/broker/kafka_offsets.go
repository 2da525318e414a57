package broker

// KEEL_KAFKA_GROUP_OFFSETS (Keel's request 10450): a Kafka group's
// coordinator on another broker group commits, reads or drops here the
// committed offsets of the partitions this group hosts
// (internal/kafka/offsets.go: an offset lives with its partition's
// queue). Ext fields: consumerGroup; topic; op, one of
//
//	commit  body {"offsets":{"<queueId>":offset,...}}: stored, then
//	        answered once durable
//	fetch   answer body {"offsets":{"<topic>":{"<queueId>":offset}}}, of
//	        topic's queues, or of every topic when topic is empty
//	delete  body {"queues":[queueId,...]}: dropped, answered once durable
//
// Only a master answers (a slave: SLAVE_NOT_AVAILABLE; it takes no
// commits of its own). "Durable" is core.FlushOffsets: the offsets file
// written and, on a master serving slaves, the offsets record confirmed
// by the in-sync slaves, so the commit survives a failover of this group.
// A queue outside the topic's read queues, or a negative offset, is
// INVALID_PARAMETER and nothing of the request is applied.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/keelmq/keel/internal/remoting"
)

// KafkaOffsets is the body of KEEL_KAFKA_GROUP_OFFSETS, both ways.
type KafkaOffsets struct {
	// Offsets: a commit's queue -> offset.
	Offsets map[string]int64 `json:"offsets,omitempty"`
	// Queues: a delete's queues.
	Queues []int32 `json:"queues,omitempty"`
	// Topics: a fetch's answer, topic -> queue -> offset.
	Topics map[string]map[string]int64 `json:"topics,omitempty"`
}

// maxKafkaOffsetQueues bounds the queues of one request (a topic has at
// most MaxQueueNums).
const maxKafkaOffsetQueues = 1 << 16

func (b *Broker) handleKafkaGroupOffsets(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group, op := e.required("consumerGroup"), e.required("op")
	topic := e.str("topic")
	if e.err != nil {
		return nil, e.err
	}
	if b.cfg.BrokerID != 0 {
		return req.NewResponse(remoting.ResSlaveNotAvailable, "a slave keeps no Kafka group offsets of its own: ask the master"), nil
	}
	var body KafkaOffsets
	if len(req.Body) > 0 {
		if err := json.Unmarshal(req.Body, &body); err != nil {
			return req.NewResponse(remoting.ResInvalidParameter, "body: "+err.Error()), nil
		}
	}
	queues := func(qs []int32) (int32, error) {
		tc, ok := b.core.Topic(topic)
		if !ok {
			return 0, nil
		}
		for _, q := range qs {
			if q < 0 || q >= tc.ReadQueueNums {
				return 0, fmt.Errorf("queueId %d is not one of topic %s's %d queues", q, topic, tc.ReadQueueNums)
			}
		}
		return tc.ReadQueueNums, nil
	}
	switch op {
	case "commit":
		if len(body.Offsets) > maxKafkaOffsetQueues {
			return req.NewResponse(remoting.ResInvalidParameter, "too many queues"), nil
		}
		offs := make(map[int32]int64, len(body.Offsets))
		var qs []int32
		for k, off := range body.Offsets {
			q, err := strconv.ParseInt(k, 10, 32)
			if err != nil || off < 0 {
				return req.NewResponse(remoting.ResInvalidParameter, fmt.Sprintf("bad offset %q: %d", k, off)), nil
			}
			offs[int32(q)] = off
			qs = append(qs, int32(q))
		}
		if _, err := queues(qs); err != nil {
			return req.NewResponse(remoting.ResInvalidParameter, err.Error()), nil
		}
		for q, off := range offs {
			if err := b.core.CommitOffset(group, topic, q, off); err != nil {
				return nil, err
			}
		}
		if err := b.core.FlushOffsets(); err != nil {
			return req.NewResponse(remoting.ResSystemError, "offsets not durable: "+err.Error()), nil
		}
		return req.NewResponse(remoting.ResSuccess, ""), nil
	case "delete":
		if len(body.Queues) > maxKafkaOffsetQueues {
			return req.NewResponse(remoting.ResInvalidParameter, "too many queues"), nil
		}
		if _, err := queues(body.Queues); err != nil {
			return req.NewResponse(remoting.ResInvalidParameter, err.Error()), nil
		}
		deleted := false
		for _, q := range body.Queues {
			deleted = b.core.DeleteOffset(group, topic, q) || deleted
		}
		if deleted {
			if err := b.core.FlushOffsets(); err != nil {
				return req.NewResponse(remoting.ResSystemError, "offsets not durable: "+err.Error()), nil
			}
		}
		return req.NewResponse(remoting.ResSuccess, ""), nil
	case "fetch":
		topics := map[string]bool{topic: true}
		if topic == "" {
			topics = b.core.OffsetTopics(group)
		}
		out := KafkaOffsets{Topics: map[string]map[string]int64{}}
		for t := range topics {
			tc, ok := b.core.Topic(t)
			if !ok {
				continue
			}
			for q := int32(0); q < tc.ReadQueueNums; q++ {
				if off, ok := b.core.ConsumerOffset(group, t, q, false); ok {
					if out.Topics[t] == nil {
						out.Topics[t] = map[string]int64{}
					}
					out.Topics[t][strconv.Itoa(int(q))] = off
				}
			}
		}
		data, err := json.Marshal(out)
		if err != nil {
			return nil, err
		}
		resp := req.NewResponse(remoting.ResSuccess, "")
		resp.Body = data
		return resp, nil
	}
	return req.NewResponse(remoting.ResInvalidParameter, fmt.Sprintf("op %q: want commit, fetch or delete", op)), nil
}
