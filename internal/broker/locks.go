package broker

// LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): queue locks for orderly
// consumers, over the core's lock table (core/locks.go).
//
// A queue (group, topic, brokerName, queueId) is granted to a clientId if it
// is unlocked, already held by that clientId (which renews it), or its lock
// has not been renewed for LockExpiry (60 s). The LOCK response body lists the
// queues now held by the caller; the Go client does not check the code and
// gives the call only 1 s, so this is pure memory work under one mutex and
// never touches disk. Locks are not persisted: after a restart every lock is
// free and clients re-lock within their 20 s cycle.

import (
	"context"
	"encoding/json"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
)

// messageQueue is RocketMQ's MessageQueue; fields in fastjson's (sorted)
// order, which also shapes the object keys of GET_TOPIC_STATS_INFO.
type messageQueue struct {
	BrokerName string `json:"brokerName"`
	QueueID    int32  `json:"queueId"`
	Topic      string `json:"topic"`
}

type lockBody struct {
	ConsumerGroup string         `json:"consumerGroup"`
	ClientID      string         `json:"clientId"`
	MQSet         []messageQueue `json:"mqSet"`
}

// toLockedQueues converts a lock body's queues into the core's names.
func toLockedQueues(mqs []messageQueue) []core.LockedQueue {
	out := make([]core.LockedQueue, len(mqs))
	for i, mq := range mqs {
		out[i] = core.LockedQueue{Broker: mq.BrokerName, Topic: mq.Topic, QueueID: mq.QueueID}
	}
	return out
}

func parseLockBody(req *remoting.Command) (lockBody, error) {
	var body lockBody
	if err := json.Unmarshal(req.Body, &body); err != nil {
		return body, protoErrorf(remoting.ResInvalidParameter, "bad lock body: %v", err)
	}
	if body.ConsumerGroup == "" || body.ClientID == "" {
		return body, protoErrorf(remoting.ResInvalidParameter, "lock body without consumerGroup or clientId")
	}
	return body, nil
}

func (b *Broker) handleLockBatch(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	body, err := parseLockBody(req)
	if err != nil {
		return nil, err
	}
	held := b.core.QueueLocks().Lock(body.ConsumerGroup, body.ClientID, toLockedQueues(body.MQSet))
	mqs := make([]messageQueue, len(held))
	for i, q := range held {
		mqs[i] = messageQueue{BrokerName: q.Broker, QueueID: q.QueueID, Topic: q.Topic}
	}
	data, err := json.Marshal(map[string][]messageQueue{"lockOKMQSet": mqs})
	if err != nil {
		return nil, err
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = data
	return resp, nil
}

func (b *Broker) handleUnlockBatch(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	body, err := parseLockBody(req)
	if err != nil {
		return nil, err
	}
	b.core.QueueLocks().Unlock(body.ConsumerGroup, body.ClientID, toLockedQueues(body.MQSet))
	return req.NewResponse(remoting.ResSuccess, ""), nil
}
