package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/heapwatch"
)

// soakDuration is how long TestMixedSoakHostile runs: KEEL_SOAK_DURATION
// (a Go duration), else ten minutes.
func soakDuration(t *testing.T) time.Duration {
	if s := os.Getenv("KEEL_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("KEEL_SOAK_DURATION: %v", err)
		}
		return d
	}
	return 10 * time.Minute
}

// hostileKafkaProduce is a Produce v9 request of about size bytes that
// declares one minimal topic entry (an empty name, no partitions, no tags:
// 3 bytes) per 3 bytes: the costliest Produce per byte to decode naively.
func hostileKafkaProduce(size int) []byte {
	n := (size - 64) / 3
	b := make([]byte, 4, size)
	b = binary.BigEndian.AppendUint16(b, 0) // Produce
	b = binary.BigEndian.AppendUint16(b, 9)
	b = binary.BigEndian.AppendUint32(b, 1) // correlation id
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "evil"...)
	b = append(b, 0)                           // header tags
	b = append(b, 0)                           // transactional id: null
	b = binary.BigEndian.AppendUint16(b, 1)    // acks
	b = binary.BigEndian.AppendUint32(b, 1000) // timeout
	b = binary.AppendUvarint(b, uint64(n)+1)
	for range n {
		b = append(b, 1, 1, 0) // name "", partitions [], tags
	}
	b = append(b, 0) // body tags
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// hostileAMQPDeclare is an AMQP connection's handshake (guest) followed by
// a queue.declare whose arguments are about tableBytes of distinct void
// fields (3 bytes on the wire each).
func hostileAMQPDeclare(tableBytes int) []byte {
	b := append([]byte(nil), wire.ProtocolHeader...)
	b = wire.AppendMethodFrame(b, 0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: []byte("\x00guest\x00guest"), Locale: "en_US"})
	b = wire.AppendMethodFrame(b, 0, &wire.ConnectionTuneOk{ChannelMax: 10, FrameMax: 131072})
	b = wire.AppendMethodFrame(b, 0, &wire.ConnectionOpen{VirtualHost: "/"})
	b = wire.AppendMethodFrame(b, 1, &wire.ChannelOpen{})
	args := wire.Table{}
	for i := 0; len(args)*6 < tableBytes; i++ {
		args[fmt.Sprintf("%x", i)] = nil
	}
	return wire.AppendMethodFrame(b, 1, &wire.QueueDeclare{Queue: "evil", Arguments: args})
}

// soakLedger records what a door acknowledged and what its consumer got.
type soakLedger struct {
	mu       sync.Mutex
	acked    map[string]bool
	received map[string]bool
}

func newLedger() *soakLedger {
	return &soakLedger{acked: map[string]bool{}, received: map[string]bool{}}
}

func (l *soakLedger) ack(id string) { l.mu.Lock(); l.acked[id] = true; l.mu.Unlock() }
func (l *soakLedger) got(id string) { l.mu.Lock(); l.received[id] = true; l.mu.Unlock() }

// missing counts the acknowledged messages not received.
func (l *soakLedger) missing() (miss, acked int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.acked {
		if !l.received[id] {
			miss++
		}
	}
	return miss, len(l.acked)
}

// TestMixedSoakHostile (KEEL_LONG=1): keel serve with its RocketMQ, Kafka
// and AMQP doors under steady load from each family's own client, while
// hostile connections send each door its costliest frames (the remoting
// headers, a Produce of millions of empty topics, a queue.declare of
// tens of thousands of table fields), for KEEL_SOAK_DURATION (10 min).
// The heap stays flat — its peak over the last third of the run within
// 1.5 times the peak of the first third plus 64 MiB, and at most 768 MiB
// (it reached 2.8 GiB when Kafka requests were decoded as declared) — and
// every acknowledged message of every door is consumed.
func TestMixedSoakHostile(t *testing.T) {
	if os.Getenv("KEEL_LONG") != "1" {
		t.Skip("the mixed soak runs with KEEL_LONG=1 (KEEL_SOAK_DURATION, default 10m)")
	}
	dur := soakDuration(t)
	rlog.SetLogLevel("error")
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, logs syncBuffer
	done := make(chan int, 1)
	tempDir := t.TempDir() // made before the run starts, so removed only after it stopped
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", tempDir, "--namesrv-listen", "127.0.0.1:0",
			"--broker-listen", "127.0.0.1:0", "--amqp-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--http-listen", ""}, &stdout, &logs)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not shut down")
		}
	}()
	ns := namesrvAddrFromLogs(t, &logs)
	waitFor(t, "the broker to register", 30*time.Second, func() bool { return brokerRegistered(t, ns, "broker-a") })
	addr := func(what string, m []string) string {
		if m == nil {
			t.Fatalf("no %s address in the log", what)
		}
		return strings.Replace(m[1], "[::]", "127.0.0.1", 1)
	}
	brokerAddr := addr("broker", brokerListenRE.FindStringSubmatch(logs.String()))
	kafkaAddr := addr("Kafka", kafkaListenRE.FindStringSubmatch(logs.String()))
	amqpAddr := addr("AMQP", amqpListenRE.FindStringSubmatch(logs.String()))

	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	rmq, kaf, amq := newLedger(), newLedger(), newLedger()

	// RocketMQ: the official client, sync sends and a push consumer.
	p, err := producer.NewDefaultProducer(producer.WithNameServer([]string{ns}), producer.WithGroupName("soak-pg"), producer.WithRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	c, err := consumer.NewPushConsumer(consumer.WithNameServer([]string{ns}), consumer.WithGroupName("soak-cg"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := p.SendSync(context.Background(), primitive.NewMessage("SoakR", []byte("warm-up"))); err != nil || r.Status != primitive.SendOK {
		t.Fatalf("warm-up send: %v %v", r, err)
	}
	err = c.Subscribe("SoakR", consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range ms {
				rmq.got(string(m.Body))
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stopped(); i++ {
			id := fmt.Sprintf("r%d", i)
			if r, err := p.SendSync(context.Background(), primitive.NewMessage("SoakR", []byte(id))); err == nil && r.Status == primitive.SendOK {
				rmq.ack(id)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// Kafka: franz-go, acks=all, and a group consumer.
	kp, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer kp.Close()
	kc, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.ConsumerGroup("soak-kg"), kgo.ConsumeTopics("SoakK"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; !stopped(); i++ {
			id := fmt.Sprintf("k%d", i)
			if err := kp.ProduceSync(context.Background(), &kgo.Record{Topic: "SoakK", Value: []byte(id)}).FirstErr(); err == nil {
				kaf.ack(id)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	kctx, kcancel := context.WithCancel(context.Background())
	defer kcancel()
	go func() {
		defer wg.Done()
		for kctx.Err() == nil {
			kc.PollFetches(kctx).EachRecord(func(r *kgo.Record) { kaf.got(string(r.Value)) })
		}
	}()

	// AMQP: amqp091-go with confirms, and a consumer with acks.
	ac, err := amqp091.Dial("amqp://guest:guest@" + amqpAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	pub, err := ac.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.QueueDeclare("soak-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	sub, err := ac.Channel()
	if err != nil {
		t.Fatal(err)
	}
	deliveries, err := sub.Consume("soak-q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; !stopped(); i++ {
			id := fmt.Sprintf("a%d", i)
			dc, err := pub.PublishWithDeferredConfirm("", "soak-q", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(id)})
			if err == nil && dc.Wait() {
				amq.ack(id)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	go func() {
		defer wg.Done()
		for d := range deliveries {
			amq.got(string(d.Body))
			d.Ack(false)
		}
	}()

	// The hostile connections: two per door, each sending its frame on a
	// new connection as fast as the broker refuses it.
	jsonFrame, binaryFrame := hostileRemotingFrames(4 << 20)
	hostile := []struct {
		addr  string
		frame []byte
	}{{brokerAddr, jsonFrame}, {brokerAddr, binaryFrame},
		{kafkaAddr, hostileKafkaProduce(16 << 20)}, {kafkaAddr, hostileKafkaProduce(8 << 20)},
		{amqpAddr, hostileAMQPDeclare(120 << 10)}, {amqpAddr, hostileAMQPDeclare(60 << 10)}}
	var hostileSent atomic.Int64
	var hwg sync.WaitGroup
	for _, h := range hostile {
		hwg.Add(1)
		go func() {
			defer hwg.Done()
			for !stopped() {
				nc, err := net.Dial("tcp", h.addr)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				nc.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := nc.Write(h.frame); err == nil {
					hostileSent.Add(1)
					var b [512]byte
					for { // until the broker answers and closes, or the deadline
						if _, err := nc.Read(b[:]); err != nil {
							break
						}
					}
				}
				nc.Close()
			}
		}()
	}

	// The heap, sampled every second over the run.
	var samples []uint64
	start := time.Now()
	tick := time.NewTicker(time.Second)
	for time.Since(start) < dur {
		<-tick.C
		samples = append(samples, heapwatch.Objects())
	}
	tick.Stop()
	close(stop)
	hwg.Wait()
	third := len(samples) / 3
	var first, last uint64
	for i, s := range samples {
		if i < third {
			first = max(first, s)
		} else if i >= len(samples)-third {
			last = max(last, s)
		}
	}
	t.Logf("%v: heap peak %d MiB in the first third, %d MiB in the last; %d hostile frames sent", dur, first>>20, last>>20, hostileSent.Load())
	if last > first*3/2+64<<20 {
		t.Errorf("the heap grew: peak %d MiB in the last third, %d MiB in the first", last>>20, first>>20)
	}
	// The request budget (maxInFlightRequestBytes, 256 MiB by default) is
	// what hostile frames may hold at once; the collector lets the heap
	// reach twice what is live, and the clients of this process add theirs.
	if peak := max(first, last); peak > 768<<20 {
		t.Errorf("heap peak %d MiB, above 768 MiB (twice the request budget and the clients)", peak>>20)
	}
	if hostileSent.Load() < int64(len(hostile)) {
		t.Errorf("only %d hostile frames were sent", hostileSent.Load())
	}
	for name, l := range map[string]*soakLedger{"RocketMQ": rmq, "Kafka": kaf, "AMQP": amq} {
		waitFor(t, name+" consumers to get every acknowledged message", 2*time.Minute, func() bool { m, _ := l.missing(); return m == 0 })
		_, acked := l.missing()
		t.Logf("%s: %d acknowledged, every one consumed", name, acked)
		if acked == 0 {
			t.Errorf("%s: nothing was acknowledged during the soak", name)
		}
	}
	kcancel()
	sub.Close()
	wg.Wait()
}
