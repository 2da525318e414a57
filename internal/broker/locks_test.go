package broker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

func lockBodyJSON(group, client string, queues ...int32) []byte {
	b := lockBody{ConsumerGroup: group, ClientID: client}
	for _, q := range queues {
		b.MQSet = append(b.MQSet, messageQueue{Topic: "T", BrokerName: "broker-a", QueueID: q})
	}
	data, _ := json.Marshal(b)
	return data
}

func lockedQueues(t *testing.T, cl *client, group, clientID string, queues ...int32) []int32 {
	t.Helper()
	resp := cl.invoke(remoting.ReqLockBatchMQ, nil, lockBodyJSON(group, clientID, queues...))
	wantCode(t, resp, remoting.ResSuccess)
	var body struct {
		LockOKMQSet []messageQueue `json:"lockOKMQSet"`
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatal(err)
	}
	var out []int32
	for _, mq := range body.LockOKMQSet {
		out = append(out, mq.QueueID)
	}
	return out
}

func TestLocks(t *testing.T) {
	clk := newFakeClock()
	e := startEnv(t, func(c *Config) { c.Now = clk.Now })
	cl := e.dial()
	if got := lockedQueues(t, cl, "g", "A", 0, 1); len(got) != 2 {
		t.Fatalf("A locked %v", got)
	}
	if got := lockedQueues(t, cl, "g", "B", 1, 2); len(got) != 1 || got[0] != 2 {
		t.Fatalf("B locked %v, want [2]", got)
	}
	// Another group is independent.
	if got := lockedQueues(t, cl, "g2", "B", 1); len(got) != 1 {
		t.Fatalf("g2 locked %v", got)
	}
	wantCode(t, cl.invoke(remoting.ReqUnlockBatchMQ, nil, lockBodyJSON("g", "B", 0)), remoting.ResSuccess) // not B's: no effect
	if got := lockedQueues(t, cl, "g", "B", 0); len(got) != 0 {
		t.Fatalf("B took A's queue 0: %v", got)
	}
	wantCode(t, cl.invoke(remoting.ReqUnlockBatchMQ, nil, lockBodyJSON("g", "A", 0)), remoting.ResSuccess)
	if got := lockedQueues(t, cl, "g", "B", 0); len(got) != 1 {
		t.Fatalf("B could not lock released queue 0: %v", got)
	}
	// A's lock on 1 expires after 60 s without renewal.
	clk.Advance(61 * time.Second)
	if got := lockedQueues(t, cl, "g", "B", 1); len(got) != 1 {
		t.Fatalf("B could not take expired queue 1: %v", got)
	}
	wantCode(t, cl.invoke(remoting.ReqLockBatchMQ, nil, []byte("{")), remoting.ResInvalidParameter)
}
