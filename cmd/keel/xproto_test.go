package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Cross-protocol reads (docs/cross-protocol.md) with the clients of each
// protocol against one `keel serve` with all three front doors.

type xnode struct {
	ns, kafka, amqp string
}

func startXNode(t *testing.T) xnode {
	t.Helper()
	rlog.SetLogLevel("error")
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, logs syncBuffer
	done := make(chan int, 1)
	tempDir := t.TempDir() // made before the run starts, so removed only after it stopped
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", tempDir, "--namesrv-listen", "127.0.0.1:0",
			"--broker-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--amqp-listen", "127.0.0.1:0", "--http-listen", ""}, &stdout, &logs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not shut down:\n%s", logs.String())
		}
	})
	var n xnode
	n.ns = namesrvAddrFromLogs(t, &logs)
	waitFor(t, "the listeners", 30*time.Second, func() bool {
		if m := kafkaListenRE.FindStringSubmatch(logs.String()); m != nil {
			n.kafka = m[1]
		}
		if m := amqpListenRE.FindStringSubmatch(logs.String()); m != nil {
			n.amqp = m[1]
		}
		return n.kafka != "" && n.amqp != "" && brokerRegistered(t, n.ns, "broker-a")
	})
	return n
}

// TestCrossKafkaToRocketMQ: franz-go produces batches in every codec
// (several records each, keys, headers, timestamps); the official
// RocketMQ push consumer receives every record as a message with KEYS,
// the headers as properties, the record's timestamp as born time and its
// Kafka offset.
func TestCrossKafkaToRocketMQ(t *testing.T) {
	n := startXNode(t)
	const topic = "x-k2r"
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}
	type sent struct {
		key, codec string
		ts         int64
	}
	want := map[string]sent{}
	base := time.UnixMilli(1_700_000_000_000)
	for ci, codec := range codecs {
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.kafka), kgo.ProducerBatchCompression(codec), kgo.AllowAutoTopicCreation(),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var rs []*kgo.Record
		for i := range 4 {
			v := fmt.Sprintf("codec%d-%d-", ci, i) + string(make([]byte, 200)) // compressible
			ts := base.Add(time.Duration(ci*10+i) * time.Millisecond)
			rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(ci % 2), Key: []byte(fmt.Sprintf("k%d-%d", ci, i)), Value: []byte(v), Timestamp: ts,
				Headers: []kgo.RecordHeader{{Key: "codec", Value: []byte(strconv.Itoa(ci))}, {Key: "CONTENT_TYPE", Value: []byte("text/plain")}}})
			want[v] = sent{key: fmt.Sprintf("k%d-%d", ci, i), codec: strconv.Itoa(ci), ts: ts.UnixMilli()}
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", ci, err)
		}
		cancel()
		cl.Close()
	}
	var mu sync.Mutex
	got := map[string]*primitive.MessageExt{}
	c, err := consumer.NewPushConsumer(consumer.WithNameServer([]string{n.ns}), consumer.WithGroupName("x-k2r-cg"),
		consumer.WithInstance("x-k2r-c"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				got[string(m.Body)] = m
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
	waitFor(t, "every Kafka record at the RocketMQ consumer", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= len(want)
	})
	mu.Lock()
	defer mu.Unlock()
	for v, w := range want {
		m := got[v]
		if m == nil {
			t.Errorf("record %q not received", v[:12])
			continue
		}
		if m.GetKeys() != w.key || m.GetProperty("codec") != w.codec || m.GetProperty("CONTENT_TYPE") != "text/plain" ||
			m.BornTimestamp != w.ts || m.GetProperty("KAFKA_OFFSET") == "" || m.Topic != topic || m.MsgId == "" {
			t.Errorf("record %q: keys %q codec %q born %d (want %d) offset %q msgId %q topic %q", v[:12], m.GetKeys(), m.GetProperty("codec"),
				m.BornTimestamp, w.ts, m.GetProperty("KAFKA_OFFSET"), m.MsgId, m.Topic)
		}
	}
	if len(got) != len(want) {
		t.Errorf("received %d messages, sent %d records", len(got), len(want))
	}
	// Each record has its own entry: its queue offset is its Kafka offset,
	// none shared, although the producer sent batches of several records.
	entries := map[string]bool{}
	for v, m := range got {
		entries[fmt.Sprint(m.Queue.QueueId, "/", m.QueueOffset)] = true
		if m.GetProperty("KAFKA_OFFSET") != strconv.FormatInt(m.QueueOffset, 10) {
			t.Errorf("record %q: queue offset %d, Kafka offset %s", v[:12], m.QueueOffset, m.GetProperty("KAFKA_OFFSET"))
		}
	}
	if len(entries) != len(got) {
		t.Errorf("%d messages at %d queue offsets: some share one", len(got), len(entries))
	}
}

// TestCrossKafkaBatchToOrderlyRocketMQ: a Kafka batch of 6 records goes
// to the official RocketMQ client's orderly consumer whole, each record
// at its own queue offset (= its Kafka offset), in order.
func TestCrossKafkaBatchToOrderlyRocketMQ(t *testing.T) {
	n := startXNode(t)
	const topic = "x-k6"
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.kafka), kgo.AllowAutoTopicCreation(), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rs []*kgo.Record
	for i := range 6 {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(fmt.Sprint("r", i))})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The test is about a batch of several records: check it was one.
	fr := kmsg.NewPtrFetchRequest()
	fr.MaxBytes, fr.Version = 1<<20, 11
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	resp, err := fr.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(resp.Topics[0].Partitions[0].RecordBatches); err != nil || rb.NumRecords != 6 {
		t.Fatalf("the producer's first batch: %v, %d records, want one of 6", err, rb.NumRecords)
	}
	var mu sync.Mutex
	var got []string
	c, err := consumer.NewPushConsumer(consumer.WithNameServer([]string{n.ns}), consumer.WithGroupName("x-k6-cg"),
		consumer.WithInstance("x-k6-c"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset), consumer.WithConsumerOrder(true))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				if m.Queue.QueueId == 0 {
					got = append(got, fmt.Sprintf("%s@%d", m.Body, m.QueueOffset))
				}
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
	waitFor(t, "the 6 records at the orderly consumer", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 6
	})
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[r0@0 r1@1 r2@2 r3@3 r4@4 r5@5]" {
		t.Fatalf("orderly consumer got %v", got)
	}
}

// TestCrossRocketMQToKafka: the official RocketMQ producer sends messages
// with keys, tags and properties; a franz-go consumer reads them as
// records: KEYS as key, properties (TAGS among them) as headers, the born
// time as timestamp, dense offsets from 0 per partition.
func TestCrossRocketMQToKafka(t *testing.T) {
	n := startXNode(t)
	const topic = "x-r2k"
	p, err := producer.NewDefaultProducer(producer.WithNameServer([]string{n.ns}), producer.WithGroupName("x-r2k-pg"),
		producer.WithInstanceName("x-r2k-p"), producer.WithRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	const count = 12
	born := map[string]time.Time{}
	for i := range count {
		m := primitive.NewMessage(topic, []byte(fmt.Sprint("rmq-", i)))
		m.WithTag("TagA").WithKeys([]string{fmt.Sprint("order-", i)}).WithProperty("color", "red")
		born[string(m.Body)] = time.Now()
		if r, err := p.SendSync(context.Background(), m); err != nil || r.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, r, err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.kafka), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[string]*kgo.Record{}
	next := map[int32]int64{}
	for len(got) < count {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d", len(got), count)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		for _, r := range fs.Records() {
			if r.Offset != next[r.Partition] {
				t.Errorf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition] = r.Offset + 1
			got[string(r.Value)] = r
		}
	}
	for v, r := range got {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		i := v[len("rmq-"):]
		if string(r.Key) != "order-"+i || h["TAGS"] != "TagA" || h["color"] != "red" || h["UNIQ_KEY"] == "" {
			t.Errorf("%s: key %q headers %q", v, r.Key, h)
		}
		if d := r.Timestamp.Sub(born[v]); d < -5*time.Second || d > 5*time.Second {
			t.Errorf("%s: timestamp %v, sent at %v", v, r.Timestamp, born[v])
		}
	}
}

// TestCrossAMQP: franz-go feeds an AMQP queue declared over a Keel topic
// (x-keel-topic): amqp091-go receives the record with message-id, headers
// and timestamp; and what amqp091-go publishes into a queue over another
// topic a franz-go consumer reads: message-id as key, the properties as
// headers.
func TestCrossAMQP(t *testing.T) {
	n := startXNode(t)
	conn, err := amqp091.Dial("amqp://guest:guest@" + n.amqp + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.kafka), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"x-a2k": {0: kgo.NewOffset().AtStart()}}), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Kafka -> AMQP.
	if err := kc.ProduceSync(ctx, &kgo.Record{Topic: "x-k2a", Value: []byte("warm-up")}).FirstErr(); err != nil {
		t.Fatal(err) // creates the topic
	}
	if _, err := ch.QueueDeclare("from-kafka", true, false, false, false, amqp091.Table{"x-keel-topic": "x-k2a"}); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.Consume("from-kafka", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1_700_000_123, 0)
	if err := kc.ProduceSync(ctx, &kgo.Record{Topic: "x-k2a", Key: []byte("order-7"), Value: []byte("from kafka"), Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: "CONTENT_TYPE", Value: []byte("application/json")}, {Key: "trace", Value: []byte("abc")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-dc:
		if string(d.Body) != "from kafka" || d.MessageId != "order-7" || d.ContentType != "application/json" || d.Headers["trace"] != "abc" ||
			!d.Timestamp.Equal(ts) || d.DeliveryMode != amqp091.Persistent {
			t.Errorf("delivery %+v", d)
		}
		d.Ack(false)
	case <-ctx.Done():
		t.Fatal("the Kafka record never reached the AMQP consumer")
	}
	// Several records in one produce request: one batch, one entry, a
	// delivery per record.
	var rs []*kgo.Record
	for i := range 5 {
		rs = append(rs, &kgo.Record{Topic: "x-k2a", Value: []byte(fmt.Sprint("batched-", i))})
	}
	if err := kc.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		select {
		case d := <-dc:
			if string(d.Body) != fmt.Sprint("batched-", i) {
				t.Errorf("delivery %d: %q", i, d.Body)
			}
			d.Ack(false)
		case <-ctx.Done():
			t.Fatalf("%d of the 5 batched records reached the AMQP consumer", i)
		}
	}

	// AMQP -> Kafka: the consumer's metadata request creates x-a2k.
	waitFor(t, "topic x-a2k", 30*time.Second, func() bool {
		kc.PollFetches(ctxTimeout(200 * time.Millisecond))
		_, err := ch.QueueDeclare("to-kafka", true, false, false, false, amqp091.Table{"x-keel-topic": "x-a2k"})
		if err != nil {
			ch, _ = conn.Channel()
		}
		return err == nil
	})
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dconf, err := ch.PublishWithDeferredConfirm("", "to-kafka", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent,
		MessageId: "m-1", ContentType: "text/plain", CorrelationId: "c-1", Timestamp: ts, Headers: amqp091.Table{"x-n": int32(5)}, Body: []byte("from amqp")})
	if err != nil || !dconf.Wait() {
		t.Fatalf("publish: %v", err)
	}
	for {
		fs := kc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("the AMQP message never reached the Kafka consumer")
		}
		var r *kgo.Record
		fs.EachRecord(func(x *kgo.Record) {
			if x.Topic == "x-a2k" {
				r = x
			}
		})
		if r == nil {
			continue
		}
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		if string(r.Value) != "from amqp" || string(r.Key) != "m-1" || h["CONTENT_TYPE"] != "text/plain" || h["CORRELATION_ID"] != "c-1" ||
			h["x-n"] != "5" || h["AMQP_ROUTING_KEY"] != "to-kafka" || !r.Timestamp.Equal(ts) || r.Offset != 0 {
			t.Errorf("record offset %d key %q value %q ts %v headers %q", r.Offset, r.Key, r.Value, r.Timestamp, h)
		}
		return
	}
}

func ctxTimeout(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	time.AfterFunc(d, cancel)
	return ctx
}

// TestCrossKafkaRetry: a RocketMQ consumer that fails a message converted
// from a Kafka record gets it again: the broker cannot send a converted
// message back (its record is a Kafka batch), and the official client
// then sends it to the group's retry topic itself.
func TestCrossKafkaRetry(t *testing.T) {
	t.Parallel() // about 20 s: the client subscribes to the retry topic at its next rebalance
	n := startXNode(t)
	const topic = "x-retry"
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.kafka), kgo.AllowAutoTopicCreation(), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("fail once")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var deliveries []*primitive.MessageExt
	c, err := consumer.NewPushConsumer(consumer.WithNameServer([]string{n.ns}), consumer.WithGroupName("x-retry-cg"),
		consumer.WithInstance("x-retry-c"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			deliveries = append(deliveries, ms...)
			if len(deliveries) == 1 {
				return consumer.ConsumeRetryLater, nil
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
	waitFor(t, "the failed message again", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(deliveries) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	again := deliveries[1]
	if string(again.Body) != "fail once" || again.GetKeys() != "k" || again.ReconsumeTimes != 1 {
		t.Errorf("redelivery: body %q keys %q reconsume %d topic %q", again.Body, again.GetKeys(), again.ReconsumeTimes, again.Topic)
	}
}
