package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/controller"
	"github.com/keelmq/keel/internal/remoting"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// startTwoGroupCluster is three controllers, a NameServer and two
// broker groups of three in controller mode (broker-a, broker-b), every
// member with a Kafka and an AMQP door; kafkaNodeId is each group's base
// for its members' node ids (replica id + base).
func startTwoGroupCluster(t *testing.T) *ctrlCluster {
	t.Helper()
	return startCtrlCluster(t, ctrlClusterOpts{name: "TwoGroups", groups: []string{"broker-a", "broker-b"},
		kafka: true, amqp: true, kafkaNodeBase: true})
}

// flow is one client's record of a run: its acknowledged sends and the
// failures, with times.
type flow struct {
	mu       sync.Mutex
	acked    []time.Time // when each acknowledgement came
	started  []time.Time // when its send started
	failures []string
}

func (f *flow) ack(started, at time.Time) {
	f.mu.Lock()
	f.acked, f.started = append(f.acked, at), append(f.started, started)
	f.mu.Unlock()
}

// firstAfter is how long after t the first send started after t was
// acknowledged (0: none was).
func (f *flow) firstAfter(t time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, st := range f.started {
		if st.After(t) {
			return f.acked[i].Sub(t)
		}
	}
	return 0
}
func (f *flow) fail(at time.Time, err error) {
	f.mu.Lock()
	f.failures = append(f.failures, at.Format("15:04:05.000")+" "+err.Error())
	f.mu.Unlock()
}

// report returns the flow's acknowledgements, failures and its longest
// time without an acknowledgement between from and to.
func (f *flow) report(from, to time.Time) (n int, failures []string, gap time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	last := from
	for _, at := range f.acked {
		if at.Before(from) || at.After(to) {
			continue
		}
		n++
		gap = max(gap, at.Sub(last))
		last = at
	}
	return n, append([]string(nil), f.failures...), max(gap, to.Sub(last))
}

// TestControllerFailoverTwoGroups: one cluster of two broker groups of
// three in controller mode. The master of broker-a is killed with
// SIGKILL. Clients of all three families that use broker-b (franz-go
// producing to broker-b's partitions of a topic spread over both groups,
// the official RocketMQ producer sending to broker-b's queues, amqp091-go
// publishing with confirms to a queue stored by broker-b) carry on
// throughout, with no failure and no pause near the failover's length;
// franz-go producing to broker-a's partitions is acknowledged again once
// broker-a has a new master; a consumer reads every acknowledged record.
func TestControllerFailoverTwoGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ten processes")
	}
	rlog.SetLogLevel("error")
	c := startTwoGroupCluster(t)
	var all []*failoverBroker
	for _, name := range []string{"broker-a", "broker-b"} {
		all = append(all, c.byName(name).brokers...)
	}
	dump := func() { dumpBrokers(t, all) }
	masters := map[string]int{}
	epochs := map[string]uint32{}
	for _, cg := range c.groups {
		name, bs := cg.name, cg.brokers
		g := waitMasterElected(t, bs, cg.group)
		masters[name], epochs[name] = brokerOf(t, bs, g, g.MasterID), g.MasterEpoch
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic, queues = "TwoGroups", 4
	for _, cg := range c.groups {
		name, bs := cg.name, cg.brokers
		mc, err := remoting.Dial(ctx, bs[masters[name]].addr, remoting.ClientConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := bench.CreateTopic(ctx, mc, topic, queues); err != nil {
			t.Fatal(err)
		}
		mc.Close()
	}
	seeds := append(append([]string(nil), c.byName("broker-a").kafka...), c.byName("broker-b").kafka...)
	// Partitions follow the groups in brokerName order: broker-a's queues
	// are partitions 0-3, broker-b's 4-7.
	lastMD := ""
	defer func() {
		if t.Failed() {
			t.Logf("last Metadata: %s", lastMD)
		}
	}()
	waitFor(t, "Metadata of the topic over both groups", 30*time.Second, func() bool {
		md, err := kafkaMetadata(ctx, c.byName("broker-a").kafka[masters["broker-a"]], topic) // a slave's door is closed
		if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 2*queues {
			lastMD = fmt.Sprintf("%+v %v", md, err)
			return false
		}
		lastMD = fmt.Sprintf("brokers %+v partitions %+v", md.Brokers, md.Topics[0].Partitions)
		for _, p := range md.Topics[0].Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 {
				return false
			}
		}
		return true
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	running := func(fn func()) {
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}

	// franz-go: one producer per group's partitions.
	kafkaFlows := map[string]*flow{"broker-a": {}, "broker-b": {}}
	var kmu sync.Mutex
	acked := map[string]bool{} // every acknowledged Kafka value
	for gi, name := range []string{"broker-a", "broker-b"} {
		prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerLinger(0), kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second),
			kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
			kgo.ProduceRequestTimeout(3*time.Second), kgo.RecordDeliveryTimeout(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		f := kafkaFlows[name]
		running(func() {
			for seq := 0; !stopped(); seq++ {
				v := fmt.Sprintf("%s-%d", name, seq)
				began := time.Now()
				err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(gi*queues + seq%queues), Value: []byte(v)}).FirstErr()
				if err != nil {
					f.fail(time.Now(), err)
					continue
				}
				f.ack(began, time.Now())
				kmu.Lock()
				acked[v] = true
				kmu.Unlock()
			}
		})
	}

	// The official RocketMQ producer, sending to broker-b's queues only.
	rmqFlow := &flow{}
	toB := queueSelectorFunc(func(msg *primitive.Message, mqs []*primitive.MessageQueue, _ string) *primitive.MessageQueue {
		var bq []*primitive.MessageQueue
		for _, q := range mqs {
			if q.BrokerName == "broker-b" {
				bq = append(bq, q)
			}
		}
		if len(bq) == 0 {
			return mqs[0]
		}
		return bq[len(msg.Body)%len(bq)]
	})
	rp, err := rocketmq.NewProducer(producer.WithNameServer([]string{c.ns}), producer.WithGroupName("two-groups-rp"),
		producer.WithInstanceName("two-groups-rp"), producer.WithQueueSelector(toB), producer.WithRetry(0),
		producer.WithSendMsgTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := rp.Start(); err != nil {
		t.Fatal(err)
	}
	defer rp.Shutdown()
	running(func() {
		for seq := 0; !stopped(); seq++ {
			began := time.Now()
			res, err := rp.SendSync(ctx, primitive.NewMessage(topic, []byte(fmt.Sprintf("r-%d%s", seq, strings.Repeat("x", seq%7)))))
			switch {
			case err != nil:
				rmqFlow.fail(time.Now(), err)
				time.Sleep(50 * time.Millisecond)
			case res.Status != primitive.SendOK || res.MessageQueue.BrokerName != "broker-b":
				rmqFlow.fail(time.Now(), fmt.Errorf("status %d at %s", res.Status, res.MessageQueue.BrokerName))
			default:
				rmqFlow.ack(began, time.Now())
			}
		}
	})

	// amqp091-go: confirmed publishes to a durable queue stored by
	// broker-b, through broker-b's members' addresses.
	amqpFlow := &flow{}
	running(func() {
		for !stopped() {
			conn, _, err := dialAnyAMQP(c.byName("broker-b").amqp)
			if err != nil {
				amqpFlow.fail(time.Now(), err)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			ch, err := conn.Channel()
			if err == nil {
				_, err = ch.QueueDeclare("two-groups-q", true, false, false, false, nil)
			}
			if err == nil {
				err = ch.Confirm(false)
			}
			for err == nil && !stopped() {
				var dc *amqp091.DeferredConfirmation
				began := time.Now()
				dc, err = ch.PublishWithDeferredConfirm("", "two-groups-q", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("m")})
				if err == nil {
					wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
					var ok bool
					ok, err = dc.WaitContext(wctx)
					wcancel()
					if err == nil && !ok {
						err = fmt.Errorf("nacked")
					}
				}
				if err == nil {
					amqpFlow.ack(began, time.Now())
				}
			}
			if err != nil {
				amqpFlow.fail(time.Now(), err)
			}
			conn.Close()
		}
	})

	waitFor(t, "every client acknowledged before the kill", 60*time.Second, func() bool {
		for _, f := range []*flow{kafkaFlows["broker-a"], kafkaFlows["broker-b"], rmqFlow, amqpFlow} {
			if n, _, _ := f.report(time.Time{}, time.Now()); n < 20 {
				return false
			}
		}
		return true
	})
	start := time.Now()
	// Traffic before the kill: every client acknowledged again since start.
	everyFlow := []*flow{kafkaFlows["broker-a"], kafkaFlows["broker-b"], rmqFlow, amqpFlow}
	waitFor(t, "every client acknowledged 20 more before the kill", 30*time.Second, func() bool {
		for _, f := range everyFlow {
			if n, _, _ := f.report(start, time.Now()); n < 20 {
				return false
			}
		}
		return true
	})
	old := c.byName("broker-a").brokers[masters["broker-a"]]
	killAt := time.Now()
	if err := old.proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-old.proc.exited
	t.Logf("killed broker-a's master (broker %d)", masters["broker-a"])
	var after *controller.Group
	waitFor(t, "broker-a's new master", 30*time.Second, func() bool {
		after = c.byName("broker-a").group()
		return after != nil && after.MasterID != 0 && after.MasterEpoch > epochs["broker-a"]
	})
	var aFirst time.Duration
	waitFor(t, "franz-go acknowledged a produce to broker-a's partitions started after the kill", 30*time.Second, func() bool {
		aFirst = kafkaFlows["broker-a"].firstAfter(killAt)
		return aFirst > 0
	})
	// Traffic after the failover: every client acknowledged sends started
	// after broker-a's first one on its new master.
	resumed := killAt.Add(aFirst)
	waitFor(t, "every client acknowledging after the failover", 30*time.Second, func() bool {
		for _, f := range everyFlow {
			if f.firstAfter(resumed) == 0 {
				return false
			}
			if n, _, _ := f.report(resumed, time.Now()); n < 20 {
				return false
			}
		}
		return true
	})
	end := time.Now()
	close(stop)
	wg.Wait()

	t.Logf("broker-a: new master replica %d at epoch %d; franz-go's first acknowledgement on its partitions %v after the kill",
		after.MasterID, after.MasterEpoch, aFirst.Round(time.Millisecond))
	// The other group's clients: no failure, no pause anywhere near the
	// failover's length (a second is generous for one send at a time on
	// a loaded machine; the failover took aFirst).
	for name, f := range map[string]*flow{"franz-go on broker-b": kafkaFlows["broker-b"], "official RocketMQ on broker-b": rmqFlow, "amqp091-go on broker-b": amqpFlow} {
		n, failures, gap := f.report(start, end)
		t.Logf("%s: %d acknowledged from 20 sends before the kill to the end, longest without one %v, %d failures", name, n, gap.Round(time.Millisecond), len(failures))
		if len(failures) > 0 {
			dump()
			t.Errorf("%s failed while broker-a failed over: %v", name, failures)
		}
		if gap > max(aFirst/2, time.Second) {
			t.Errorf("%s went %v without an acknowledgement (broker-a's failover took %v)", name, gap, aFirst)
		}
	}

	// Every acknowledged Kafka record is read back.
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := map[string]bool{}
	waitFor(t, "every acknowledged Kafka record read back", 60*time.Second, func() bool {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := cons.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
		for v := range acked {
			if !got[v] {
				return false
			}
		}
		return true
	})
}

// queueSelectorFunc is a producer.QueueSelector of a function.
type queueSelectorFunc func(*primitive.Message, []*primitive.MessageQueue, string) *primitive.MessageQueue

func (f queueSelectorFunc) Select(m *primitive.Message, mqs []*primitive.MessageQueue, last string) *primitive.MessageQueue {
	return f(m, mqs, last)
}
