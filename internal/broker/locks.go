package broker

// LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): queue locks for orderly
// consumers.
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
	"sync"
	"time"

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

type lockKey struct {
	group string
	mq    messageQueue
}

type lockEntry struct {
	clientID string
	renewed  time.Time
}

type lockTable struct {
	expiry time.Duration
	now    func() time.Time

	mu    sync.Mutex
	locks map[lockKey]lockEntry
}

func newLockTable(expiry time.Duration, now func() time.Time) *lockTable {
	return &lockTable{expiry: expiry, now: now, locks: make(map[lockKey]lockEntry)}
}

// lock grants what it can and returns the queues held by clientID.
func (t *lockTable) lock(group, clientID string, mqs []messageQueue) []messageQueue {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	held := make([]messageQueue, 0, len(mqs))
	for _, mq := range mqs {
		k := lockKey{group, mq}
		e, ok := t.locks[k]
		if ok && e.clientID != clientID && now.Sub(e.renewed) < t.expiry {
			continue
		}
		t.locks[k] = lockEntry{clientID: clientID, renewed: now}
		held = append(held, mq)
	}
	t.sweepLocked(now)
	return held
}

// sweepLocked drops a bounded number of expired locks so the table does not
// grow with queues nobody locks any more.
func (t *lockTable) sweepLocked(now time.Time) {
	const maxSweep = 64
	n := 0
	for k, e := range t.locks {
		if n++; n > maxSweep {
			return
		}
		if now.Sub(e.renewed) >= t.expiry {
			delete(t.locks, k)
		}
	}
}

func (t *lockTable) unlock(group, clientID string, mqs []messageQueue) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, mq := range mqs {
		k := lockKey{group, mq}
		if e, ok := t.locks[k]; ok && e.clientID == clientID {
			delete(t.locks, k)
		}
	}
}

// holder returns the client holding a queue lock, if unexpired.
func (t *lockTable) holder(group string, mq messageQueue) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.locks[lockKey{group, mq}]
	if !ok || t.now().Sub(e.renewed) >= t.expiry {
		return "", false
	}
	return e.clientID, true
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
	held := b.locks.lock(body.ConsumerGroup, body.ClientID, body.MQSet)
	data, err := json.Marshal(map[string][]messageQueue{"lockOKMQSet": held})
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
	b.locks.unlock(body.ConsumerGroup, body.ClientID, body.MQSet)
	return req.NewResponse(remoting.ResSuccess, ""), nil
}
