package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/history"
	"github.com/keelmq/keel/internal/remoting"
)

// officialPushConsumer starts a push consumer of group on topic from its
// first offset, recording every delivery into h as family "rocketmq".
func officialPushConsumer(t *testing.T, ns, topic, group, instance string, h *history.History) rocketmq.PushConsumer {
	t.Helper()
	c, err := consumer.NewPushConsumer(consumer.WithNameServer([]string{ns}), consumer.WithGroupName(group),
		consumer.WithInstance(instance), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			now := time.Now()
			for _, m := range ms {
				h.AddDelivery("rocketmq", group, fmt.Sprintf("%s/%d", m.Queue.BrokerName, m.Queue.QueueId), m.QueueOffset, m.Body, now)
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

// officialSend sends one history message with p and records it.
func officialSend(p rocketmq.Producer, topic, id string, seq int, h *history.History) history.Send {
	body := historyBody(id, seq)
	s := history.Send{Family: "rocketmq", ID: id, Sum: history.Checksum(body), Start: time.Now(), Offset: -1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	res, err := p.SendSync(ctx, primitive.NewMessage(topic, body))
	cancel()
	s.End = time.Now()
	switch {
	case err != nil:
		s.Err = err.Error()
	case res.Status != primitive.SendOK:
		s.Err = fmt.Sprintf("status %d", res.Status)
	default:
		s.Acked = true
		s.Queue, s.Offset = fmt.Sprintf("%s/%d", res.MessageQueue.BrokerName, res.MessageQueue.QueueId), res.QueueOffset
	}
	h.AddSend(s)
	return s
}

// consumerOffset asks the broker at addr for group's committed offset of
// topic's queue q (-1: none).
func consumerOffset(ctx context.Context, addr, group, topic string, q int) (int64, error) {
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{})
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqQueryConsumerOffset, map[string]string{
		"consumerGroup": group, "topic": topic, "queueId": strconv.Itoa(q), "setZeroIfNotFound": "false"}, nil))
	if err != nil {
		return 0, err
	}
	if resp.Code != remoting.ResSuccess {
		return -1, nil
	}
	return strconv.ParseInt(resp.Ext("offset"), 10, 64)
}

// TestControllerFailoverOfficialClient is the official RocketMQ Go client
// across kill -9 of a controller-mode group's master, in real processes
// on loopback. A producer started before the kill (retries 2) goes on
// sending: the time from the kill to its first SEND_OK is its own route
// refresh (the client reads the NameServer's routes every 30 s, a
// constant of the client, not an option) on top of the election. A
// producer started anew every second after the kill (each start reads
// the routes) stands for a one-second refresh. A push consumer group
// started after the master died receives the whole backlog, every
// acknowledged message from before and after the kill. A group that
// consumed part of the topic and stopped before the kill, its offsets
// committed and on both slaves, resumes on the new master at exactly
// those offsets: nothing below them delivered again, nothing at or above
// them skipped.
func TestControllerFailoverOfficialClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes and the official client")
	}
	rlog.SetLogLevel("error")
	hc := startHistoryCluster(t)
	g := waitMasterElected(t, hc.brokers, hc.group)
	oldMasterID, firstEpoch := g.MasterID, g.MasterEpoch
	master := brokerOf(t, hc.brokers, g, oldMasterID)
	const topic, queues = "OfficialFailover", 4
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	mc, err := remoting.Dial(ctx, hc.brokers[master].addr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.CreateTopic(ctx, mc, topic, queues); err != nil {
		t.Fatal(err)
	}
	mc.Close()

	h := &history.History{}
	p1, err := producer.NewDefaultProducer(producer.WithNameServer([]string{hc.ns}), producer.WithGroupName("oc-p1"),
		producer.WithInstanceName("oc-p1"), producer.WithRetry(2), producer.WithSendMsgTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p1.Start(); err != nil {
		t.Fatal(err)
	}
	p1Started := time.Now()
	defer p1.Shutdown()
	stopP1 := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := 0; ; seq++ {
			select {
			case <-stopP1:
				return
			default:
			}
			if s := officialSend(p1, topic, fmt.Sprintf("a-%06d", seq), seq, h); !s.Acked {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	defer func() {
		select {
		case <-stopP1:
		default:
			close(stopP1)
		}
		wg.Wait()
	}()

	// The group that stops before the kill: it consumes what is there,
	// stops (committing its offsets), and its offsets reach the slaves.
	waitFor(t, "300 messages acknowledged", 30*time.Second, func() bool { return h.Acked("rocketmq") >= 300 })
	c1 := officialPushConsumer(t, hc.ns, topic, "oc-before", "oc-before-1", h)
	waitFor(t, "oc-before consuming", 30*time.Second, func() bool {
		return len(h.Deliveries("rocketmq", "oc-before")) >= 300
	})
	c1.Shutdown()
	committed := make([]int64, queues)
	waitFor(t, "oc-before's committed offsets on the master and both slaves", 30*time.Second, func() bool {
		for q := range queues {
			var at []int64
			for _, b := range hc.brokers {
				off, err := consumerOffset(ctx, b.addr, "oc-before", topic, q)
				if err != nil {
					return false
				}
				at = append(at, off)
			}
			if at[0] <= 0 || at[0] != at[1] || at[1] != at[2] {
				return false
			}
			committed[q] = at[0]
		}
		return true
	})
	t.Logf("oc-before committed %v before the kill", committed)

	killAt := time.Now()
	hc.brokers[master].proc.cmd.Process.Signal(syscall.SIGKILL)
	<-hc.brokers[master].proc.exited
	h.AddFault("kill -9 master", killAt)

	// A producer started anew every second: each start reads the routes.
	var fresh time.Duration
	for i := 0; fresh == 0; i++ {
		if time.Since(killAt) > 40*time.Second {
			dumpBrokers(t, hc.brokers)
			t.Fatal("no SEND_OK for a producer started anew every second within 40 s of the kill")
		}
		round := time.Now()
		p, err := producer.NewDefaultProducer(producer.WithNameServer([]string{hc.ns}), producer.WithGroupName("oc-p2"),
			producer.WithInstanceName(fmt.Sprintf("oc-p2-%d", i)), producer.WithRetry(2), producer.WithSendMsgTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if s := officialSend(p, topic, fmt.Sprintf("b-%06d", i), i, h); s.Acked {
			fresh = s.End.Sub(killAt)
		}
		p.Shutdown()
		if d := time.Until(round.Add(time.Second)); fresh == 0 && d > 0 {
			time.Sleep(d)
		}
	}
	g = hc.group()
	if g == nil || g.MasterID == oldMasterID || g.MasterEpoch <= firstEpoch {
		t.Fatalf("after the kill: %+v", g)
	}
	t.Logf("kill -9 of the master to the first SEND_OK of a producer started anew every second: %v", fresh.Round(time.Millisecond))

	// The producer that was running: its first SEND_OK of a send started
	// after the kill.
	var first time.Duration
	waitFor(t, "a SEND_OK for the producer started before the kill", 45*time.Second, func() bool {
		for _, s := range h.Sends("rocketmq") {
			if s.Acked && s.ID[0] == 'a' && s.Start.After(killAt) {
				first = s.End.Sub(killAt)
				return true
			}
		}
		return false
	})
	t.Logf("kill -9 of the master to the first SEND_OK of the producer started %v before it (the client's 30 s route refresh): %v",
		killAt.Sub(p1Started).Round(time.Millisecond), first.Round(time.Millisecond))
	waitFor(t, "100 more SEND_OK after the failover", 30*time.Second, func() bool {
		n := 0
		for _, s := range h.Sends("rocketmq") {
			if s.Acked && s.Start.After(killAt) {
				n++
			}
		}
		return n >= 100
	})
	close(stopP1)
	wg.Wait()

	// A group started after the master died gets the whole backlog; the
	// group stopped before the kill resumes at its committed offsets.
	c2 := officialPushConsumer(t, hc.ns, topic, "oc-after", "oc-after-1", h)
	defer c2.Shutdown()
	resumed := time.Now()
	c1 = officialPushConsumer(t, hc.ns, topic, "oc-before", "oc-before-2", h)
	defer c1.Shutdown()
	waitFor(t, "oc-after receiving every acknowledged message", 60*time.Second, func() bool { return h.Delivered("rocketmq", "oc-after") == 0 })
	want := map[string]bool{} // acked at or above oc-before's committed offset
	for _, s := range h.Sends("rocketmq") {
		if s.Acked {
			q := queueNum(s.Queue)
			if s.Offset >= committed[q] {
				want[s.ID] = true
			}
		}
	}
	waitFor(t, "oc-before receiving everything from its committed offsets on", 60*time.Second, func() bool {
		got := map[string]bool{}
		for _, d := range h.Deliveries("rocketmq", "oc-before") {
			if d.At.After(resumed) {
				got[d.ID] = true
			}
		}
		for id := range want {
			if !got[id] {
				return false
			}
		}
		return true
	})
	for _, d := range h.Deliveries("rocketmq", "oc-before") {
		q := queueNum(d.Queue)
		if d.At.After(resumed) && d.Offset < committed[q] {
			t.Errorf("oc-before got %s at queue %d offset %d after the failover, below its committed offset %d", d.ID, q, d.Offset, committed[q])
		}
	}
	rep := h.Check(history.Expect{Family: "rocketmq", Groups: []string{"oc-after"}})
	rep.Log(t.Logf)
	if !rep.OK() {
		dumpBrokers(t, hc.brokers)
		t.Fatalf("%d anomalies", len(rep.Anomalies))
	}
}
