package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/translate"
	"github.com/klauspost/compress/zstd"
)

func tagProps(tag string) string {
	return message.EncodeProperties(map[string]string{"TAGS": tag})
}

func TestPullStatusTable(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	for i := 0; i < 3; i++ {
		wantCode(t, cl.sendV1("T", 0, "", []byte{byte(i)}), remoting.ResSuccess)
	}
	e.waitMax("T", 0, 3)
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	cases := []struct {
		name   string
		queue  int32
		offset int64
		code   int16
		next   string
	}{
		{"found", 0, 0, codePullSuccess(), "3"},
		{"overflow one", 0, 3, remoting.ResPullNotFound, "3"},
		{"overflow badly", 0, 10, remoting.ResPullOffsetMoved, "3"},
		{"empty queue at 0", 1, 0, remoting.ResPullNotFound, "0"},
		{"empty queue not at 0", 1, 5, remoting.ResPullOffsetMoved, "0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", tc.queue, tc.offset, 0, 0), nil)
			wantCode(t, resp, tc.code)
			for _, k := range []string{"nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId"} {
				if _, ok := resp.ExtFields[k]; !ok {
					t.Errorf("missing ext %s", k)
				}
			}
			if resp.ExtFields["nextBeginOffset"] != tc.next {
				t.Errorf("nextBeginOffset %s, want %s", resp.ExtFields["nextBeginOffset"], tc.next)
			}
		})
	}
	resp := cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 1, 0, 0), nil)
	ms := splitRecords(t, resp.Body)
	if len(ms) != 2 || ms[0].QueueOffset != 1 || ms[1].Body[0] != 2 {
		t.Fatalf("pulled %d messages", len(ms))
	}
}

func codePullSuccess() int16 { return remoting.ResSuccess }

func TestPullChecks(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	e.waitMax("T", 0, 1)
	wantCode(t, cl.invoke(remoting.ReqPullMessage, pullExt("g", "Nope", 0, 0, 0, 0), nil), remoting.ResTopicNotExist)
	wantCode(t, cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 7, 0, 0, 0), nil), remoting.ResInvalidParameter)
	// No heartbeat and no subscription in the request.
	wantCode(t, cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 0, 0, 0), nil), remoting.ResSubscriptionNotExist)
	// Subscription in the request (bit2).
	ext := pullExt("g", "T", 0, 0, remoting.PullFlagSubscription, 0)
	ext["subscription"] = "*"
	wantCode(t, cl.invoke(remoting.ReqPullMessage, ext, nil), remoting.ResSuccess)
	ext["expressionType"] = "SQL92"
	ext["subscription"] = "a > 1"
	resp := cl.invoke(remoting.ReqPullMessage, ext, nil)
	wantCode(t, resp, remoting.ResSystemError)
	if resp.Remark != "The broker does not support consumer to filter message by SQL92" {
		t.Errorf("remark %q", resp.Remark)
	}
	// Heartbeat for another topic only.
	wantCode(t, cl.heartbeat("c1", "g", "Other", "*", "CLUSTERING"), remoting.ResSuccess)
	wantCode(t, cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 0, 0, 0), nil), remoting.ResSubscriptionNotExist)
}

func TestPullTagFilter(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	for _, tag := range []string{"A", "B", "", "C", "A"} {
		props := ""
		if tag != "" {
			props = tagProps(tag)
		}
		wantCode(t, cl.sendV1("T", 0, props, []byte(tag)), remoting.ResSuccess)
	}
	e.waitMax("T", 0, 5)
	wantCode(t, cl.heartbeat("c1", "g", "T", "A || C", "CLUSTERING"), remoting.ResSuccess)
	resp := cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 0, 0, 0), nil)
	wantCode(t, resp, remoting.ResSuccess)
	var got string
	for _, m := range splitRecords(t, resp.Body) {
		got += string(m.Body)
	}
	if got != "ACA" {
		t.Fatalf("tags delivered %q, want ACA", got)
	}
	if resp.ExtFields["nextBeginOffset"] != "5" {
		t.Fatalf("next %s", resp.ExtFields["nextBeginOffset"])
	}
	// Only non-matching messages: 20 with an advanced offset.
	wantCode(t, cl.heartbeat("c1", "g", "T", "Z", "CLUSTERING"), remoting.ResSuccess)
	resp = cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 0, 0, 0), nil)
	wantCode(t, resp, remoting.ResPullRetryImmediately)
	if resp.ExtFields["nextBeginOffset"] == "0" {
		t.Fatal("NO_MATCHED_MESSAGE did not advance")
	}
}

func TestPullCommitOffset(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	e.waitMax("T", 0, 1)
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	ext := pullExt("g", "T", 0, 0, remoting.PullFlagCommitOffset, 0)
	ext["commitOffset"] = "1"
	wantCode(t, cl.invoke(remoting.ReqPullMessage, ext, nil), remoting.ResSuccess)
	if off, ok := e.b.core.ConsumerOffset("g", "T", 0, false); !ok || off != 1 {
		t.Fatalf("committed offset %d %v", off, ok)
	}
}

// invokeAsync sends a request and returns a channel for its response.
func (cl *client) invokeAsync(code int16, ext map[string]string) <-chan *remoting.Command {
	ch := make(chan *remoting.Command, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := cl.c.Invoke(ctx, remoting.NewRequest(code, ext, nil))
		if err != nil {
			close(ch)
			return
		}
		ch <- resp
	}()
	return ch
}

func TestLongPollWakesOnMessage(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("first")), remoting.ResSuccess)
	e.waitMax("T", 0, 1)
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	ch := cl.invokeAsync(remoting.ReqPullMessage, pullExt("g", "T", 0, 1, remoting.PullFlagSuspend, 15000))
	waitFor(t, "pull held", func() bool { return e.b.pulls.held() == 1 })
	wantCode(t, cl.sendV1("T", 0, "", []byte("second")), remoting.ResSuccess)
	select {
	case resp := <-ch:
		wantCode(t, resp, remoting.ResSuccess)
		ms := splitRecords(t, resp.Body)
		if len(ms) != 1 || string(ms[0].Body) != "second" {
			t.Fatalf("woken pull returned %d messages", len(ms))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("held pull not answered after a message arrived")
	}
}

func TestLongPollTimeoutAnswersNotFound(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	e.waitMax("T", 0, 1)
	start := time.Now()
	resp := <-cl.invokeAsync(remoting.ReqPullMessage, pullExt("g", "T", 0, 1, remoting.PullFlagSuspend, 200))
	if resp == nil {
		t.Fatal("no response")
	}
	wantCode(t, resp, remoting.ResPullNotFound)
	if resp.ExtFields["nextBeginOffset"] != "1" {
		t.Fatalf("next %s", resp.ExtFields["nextBeginOffset"])
	}
	if time.Since(start) < 150*time.Millisecond {
		t.Fatal("pull was not held")
	}
	if e.b.pulls.held() != 0 {
		t.Fatal("held count not released")
	}
}

func TestLongPollTagMismatchKeepsHolding(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.heartbeat("c1", "g", "T", "A", "CLUSTERING"), remoting.ResSuccess)
	wantCode(t, cl.invoke(remoting.ReqUpdateAndCreateTopic, map[string]string{"topic": "T", "readQueueNums": "1", "writeQueueNums": "1"}, nil), remoting.ResSuccess)
	ch := cl.invokeAsync(remoting.ReqPullMessage, pullExt("g", "T", 0, 0, remoting.PullFlagSuspend, 15000))
	waitFor(t, "pull held", func() bool { return e.b.pulls.held() == 1 })
	wantCode(t, cl.sendV1("T", 0, tagProps("B"), []byte("b")), remoting.ResSuccess)
	wantCode(t, cl.sendV1("T", 0, tagProps("A"), []byte("a")), remoting.ResSuccess)
	resp := <-ch
	if resp == nil {
		t.Fatal("no response")
	}
	wantCode(t, resp, remoting.ResSuccess)
	ms := splitRecords(t, resp.Body)
	if len(ms) != 1 || string(ms[0].Body) != "a" {
		t.Fatalf("got %d messages", len(ms))
	}
}

func TestLongPollLimitAnswersBusy(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.MaxHeldPulls = 1 })
	cl := e.dial()
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	e.waitMax("T", 0, 1)
	_ = cl.invokeAsync(remoting.ReqPullMessage, pullExt("g", "T", 0, 1, remoting.PullFlagSuspend, 15000))
	waitFor(t, "pull held", func() bool { return e.b.pulls.held() == 1 })
	resp := cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 1, remoting.PullFlagSuspend, 15000), nil)
	wantCode(t, resp, remoting.ResSystemBusy)
}

func TestLongPollDroppedOnClose(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	e.waitMax("T", 0, 1)
	_ = cl.invokeAsync(remoting.ReqPullMessage, pullExt("g", "T", 0, 1, remoting.PullFlagSuspend, 15000))
	waitFor(t, "pull held", func() bool { return e.b.pulls.held() == 1 })
	cl.c.Close()
	// The wake finds the connection closed and drops the answer quietly.
	wantCode(t, e.dial().sendV1("T", 0, "", []byte("y")), remoting.ResSuccess)
	waitFor(t, "held pull released", func() bool { return e.b.pulls.held() == 0 })
}

func TestPullStatusCodeMapping(t *testing.T) {
	cases := []struct {
		st     store.GetStatus
		offset int64
		want   int16
	}{
		{store.Found, 0, 0}, {store.NoMatchedMessage, 3, 20}, {store.MessageWasRemoving, 3, 20},
		{store.OffsetOverflowOne, 3, 19}, {store.OffsetOverflowBadly, 3, 21}, {store.OffsetTooSmall, 3, 21},
		{store.NoMatchedLogicQueue, 0, 19}, {store.NoMatchedLogicQueue, 2, 21},
		{store.NoMessageInQueue, 0, 19}, {store.NoMessageInQueue, 2, 21},
	}
	for _, tc := range cases {
		if got := pullStatusCode(tc.st, tc.offset); got != tc.want {
			t.Errorf("%v@%d -> %d, want %d", tc.st, tc.offset, got, tc.want)
		}
	}
}

func TestCloseAnswersHeldPulls(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	e.waitMax("T", 0, 1)
	ch := cl.invokeAsync(remoting.ReqPullMessage, pullExt("g", "T", 0, 1, remoting.PullFlagSuspend, 15000))
	waitFor(t, "pull held", func() bool { return e.b.pulls.held() == 1 })
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	wantAnswered(t, ch, remoting.ResPullNotFound)
}

// TestPullSkipsOtherRecordTypes: a Kafka batch stored in a queue that
// does not convert (its body is no batch) is not handed to a RocketMQ
// consumer as raw bytes: the pull returns the RocketMQ messages around
// it, and a pull finding only the batch answers retry-immediately with
// the next offset past it.
func TestPullSkipsOtherRecordTypes(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("before")), remoting.ResSuccess)
	rec, err := record.AppendEnvelope(nil, record.KafkaBatch, 1, []record.Dest{{Topic: "T", QueueID: 0}}, []byte("kafka batch bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := e.st.PutRecord(context.Background(), rec); !r.OK() {
		t.Fatalf("put record: %v %v", r.Status, r.Err)
	}
	wantCode(t, cl.sendV1("T", 0, "", []byte("after")), remoting.ResSuccess)
	e.waitMax("T", 0, 3)
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	resp := cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 0, 0, 0), nil)
	wantCode(t, resp, remoting.ResSuccess)
	var got []string
	for _, m := range splitRecords(t, resp.Body) {
		got = append(got, string(m.Body))
	}
	if len(got) != 2 || got[0] != "before" || got[1] != "after" || resp.ExtFields["nextBeginOffset"] != "3" {
		t.Fatalf("pulled %q next %s, want [before after] next 3", got, resp.ExtFields["nextBeginOffset"])
	}
	resp = cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 1, 0, 0), nil)
	if resp.Code == remoting.ResSuccess {
		for _, m := range splitRecords(t, resp.Body) {
			if string(m.Body) != "after" {
				t.Fatalf("pull at the batch delivered %q", m.Body)
			}
		}
	} else if resp.Code != remoting.ResPullRetryImmediately || resp.ExtFields["nextBeginOffset"] != "2" {
		t.Fatalf("pull at the batch: code %d next %s", resp.Code, resp.ExtFields["nextBeginOffset"])
	}
}

// TestPullConvertsOtherRecordTypes: a Kafka batch and an AMQP message in a
// RocketMQ queue reach a RocketMQ consumer as RocketMQ messages (one per
// Kafka record, at the entry's queue offset), between the native ones.
func TestPullConvertsOtherRecordTypes(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("before")), remoting.ResSuccess)
	batch := translate.AppendKafkaBatch(nil, []translate.KafkaRecord{
		{Offset: 0, Timestamp: 1000, Key: []byte("k0"), Value: []byte("kafka-0"), Headers: []translate.Header{{Key: "h", Value: []byte("v")}}},
		{Offset: 1, Timestamp: 1001, Value: []byte("kafka-1")}})
	amqpBody := []byte{0, 2, 'r', 'k', 0, 0, 0, 2, 0, 0} // exchange "", routing key "rk", no properties
	amqpBody = append(amqpBody, "amqp"...)
	for _, r := range []struct {
		typ  record.Type
		n    int32
		body []byte
	}{{record.KafkaBatch, 2, batch}, {record.AMQP, 1, amqpBody}} {
		rec, err := record.AppendEnvelope(nil, r.typ, r.n, []record.Dest{{Topic: "T", QueueID: 0}}, r.body)
		if err != nil {
			t.Fatal(err)
		}
		if res, _ := e.st.PutRecord(context.Background(), rec); !res.OK() {
			t.Fatalf("put record: %v %v", res.Status, res.Err)
		}
	}
	wantCode(t, cl.sendV1("T", 0, "", []byte("after")), remoting.ResSuccess)
	e.waitMax("T", 0, 4)
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	resp := cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 0, 0, 0), nil)
	wantCode(t, resp, remoting.ResSuccess)
	var got []string
	for _, m := range splitRecords(t, resp.Body) {
		p := message.ParseProperties(m.Properties)
		got = append(got, fmt.Sprintf("%s@%d", m.Body, m.QueueOffset))
		if string(m.Body) == "kafka-0" && (p["KEYS"] != "k0" || p["h"] != "v" || p["KAFKA_OFFSET"] != "0" || m.BornTimestamp != 1000 || m.Topic != "T") {
			t.Errorf("kafka-0: %+v", m)
		}
		if string(m.Body) == "amqp" && p["AMQP_ROUTING_KEY"] != "rk" {
			t.Errorf("amqp: %+v", m)
		}
	}
	if want := "[before@0 kafka-0@1 kafka-1@1 amqp@2 after@3]"; fmt.Sprint(got) != want || resp.ExtFields["nextBeginOffset"] != "4" {
		t.Fatalf("pulled %v next %s, want %s next 4", got, resp.ExtFields["nextBeginOffset"], want)
	}
}

// TestPullConvertedBytesBounded: converted messages count against
// MaxPullBytes: once a pull passes it, the entries after are left for the
// next pull (nextBeginOffset points at the first one left), and the next
// pulls get them all, each batch whole. The batches are zstd-compressed,
// so their stored size (which bounds the store's read) is far below what
// they convert to.
func TestPullConvertedBytesBounded(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.MaxPullBytes = 8 << 10 })
	cl := e.dial()
	const batches, per = 6, 4
	if _, err := e.b.Core().EnsureTopic("T", 1, 6); err != nil {
		t.Fatal(err)
	}
	for i := range batches {
		var recs []translate.KafkaRecord
		for j := range per {
			recs = append(recs, translate.KafkaRecord{Offset: int64(i*per + j), Timestamp: 1, Value: make([]byte, 1000)})
		}
		rec, err := record.AppendEnvelope(nil, record.KafkaBatch, per, []record.Dest{{Topic: "T", QueueID: 0}}, zstdBatch(t, translate.AppendKafkaBatch(nil, recs)))
		if err != nil {
			t.Fatal(err)
		}
		if res, _ := e.st.PutRecord(context.Background(), rec); !res.OK() {
			t.Fatalf("put record: %v %v", res.Status, res.Err)
		}
	}
	e.waitMax("T", 0, batches)
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	seen, pulls := map[int64]int{}, 0
	for off := int64(0); off < batches; pulls++ {
		resp := cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, off, 0, 0), nil)
		wantCode(t, resp, remoting.ResSuccess)
		if len(resp.Body) > 8<<10+per*1200 {
			t.Fatalf("pull at %d: %d bytes, the limit is %d (plus the batch that passes it)", off, len(resp.Body), 8<<10)
		}
		next, _ := strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
		for _, m := range splitRecords(t, resp.Body) {
			if m.QueueOffset < off || m.QueueOffset >= next {
				t.Fatalf("pull at %d (next %d) returned queue offset %d", off, next, m.QueueOffset)
			}
			seen[m.QueueOffset]++
		}
		off = next
	}
	for i := range int64(batches) {
		if seen[i] != per {
			t.Errorf("entry %d: %d messages, want %d", i, seen[i], per)
		}
	}
	if pulls < 2 {
		t.Errorf("%d pulls: the limit did not split them", pulls)
	}
}

// zstdBatch compresses the records of an uncompressed Kafka batch.
func zstdBatch(t *testing.T, b []byte) []byte {
	w, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := append(append([]byte(nil), b[:61]...), w.EncodeAll(b[61:], nil)...)
	out[22] |= 4 // codec zstd
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

// TestPullOrderlyRefusesMultiRecordBatch: a consumer holding the queue's
// orderly lock gets the messages before a Kafka batch of several records,
// and then a clear error at the batch instead of a pull its client would
// reduce to the batch's first record; a one-record batch goes through,
// and without the lock the batch is delivered whole.
func TestPullOrderlyRefusesMultiRecordBatch(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("before")), remoting.ResSuccess)
	for _, n := range []int{1, 3} {
		var recs []translate.KafkaRecord
		for i := range n {
			recs = append(recs, translate.KafkaRecord{Offset: int64(i), Timestamp: 1, Value: fmt.Appendf(nil, "k%d-%d", n, i)})
		}
		rec, err := record.AppendEnvelope(nil, record.KafkaBatch, int32(n), []record.Dest{{Topic: "T", QueueID: 0}}, translate.AppendKafkaBatch(nil, recs))
		if err != nil {
			t.Fatal(err)
		}
		if res, _ := e.st.PutRecord(context.Background(), rec); !res.OK() {
			t.Fatalf("put record: %v %v", res.Status, res.Err)
		}
	}
	e.waitMax("T", 0, 3)
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	bodies := func(resp *remoting.Command) []string {
		var out []string
		for _, m := range splitRecords(t, resp.Body) {
			out = append(out, string(m.Body))
		}
		return out
	}
	resp := cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 0, 0, 0), nil)
	wantCode(t, resp, remoting.ResSuccess)
	if got := bodies(resp); fmt.Sprint(got) != "[before k1-0 k3-0 k3-1 k3-2]" {
		t.Fatalf("without the lock: %v", got)
	}
	if got := lockedQueues(t, cl, "g", "c1", 0); len(got) != 1 {
		t.Fatalf("locked %v", got)
	}
	resp = cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 0, 0, 0), nil)
	wantCode(t, resp, remoting.ResSuccess)
	if got := bodies(resp); fmt.Sprint(got) != "[before k1-0]" || resp.ExtFields["nextBeginOffset"] != "2" {
		t.Fatalf("orderly: %v next %s, want [before k1-0] next 2", got, resp.ExtFields["nextBeginOffset"])
	}
	resp = cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 2, 0, 0), nil)
	if resp.Code != remoting.ResSystemError || !strings.Contains(resp.Remark, "orderly") {
		t.Fatalf("orderly pull at the batch: code %d %q", resp.Code, resp.Remark)
	}
}

// TestPullKafkaRecordsHaveOwnOffsets: a Kafka batch of 3 records stored
// with one entry per record gives a RocketMQ consumer 3 messages at 3
// distinct queue offsets, dense with the RocketMQ messages around it; a
// pull starting inside the batch gets the records from there on, a pull
// of 2 messages stops inside it, and an orderly consumer (holding the
// queue's lock) gets the whole batch, each record at its own offset.
func TestPullKafkaRecordsHaveOwnOffsets(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("before")), remoting.ResSuccess)
	var recs []translate.KafkaRecord
	for i := range 3 {
		recs = append(recs, translate.KafkaRecord{Offset: int64(i), Timestamp: 1, Value: fmt.Appendf(nil, "k-%d", i)})
	}
	rec, err := record.AppendEnvelopeFlags(nil, record.KafkaBatch, record.FlagEntryPerMessage, 3, []record.Dest{{Topic: "T", QueueID: 0}}, translate.AppendKafkaBatch(nil, recs))
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := e.st.PutRecord(context.Background(), rec); !res.OK() {
		t.Fatalf("put record: %v %v", res.Status, res.Err)
	}
	wantCode(t, cl.sendV1("T", 0, "", []byte("after")), remoting.ResSuccess)
	e.waitMax("T", 0, 5)
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	pull := func(off int64, maxMsgs string) (string, string) {
		t.Helper()
		ext := pullExt("g", "T", 0, off, 0, 0)
		ext["maxMsgNums"] = maxMsgs
		resp := cl.invoke(remoting.ReqPullMessage, ext, nil)
		wantCode(t, resp, remoting.ResSuccess)
		var got []string
		for _, m := range splitRecords(t, resp.Body) {
			got = append(got, fmt.Sprintf("%s@%d", m.Body, m.QueueOffset))
		}
		return fmt.Sprint(got), resp.ExtFields["nextBeginOffset"]
	}
	for _, c := range []struct {
		off       int64
		max       string
		want, nxt string
	}{
		{0, "32", "[before@0 k-0@1 k-1@2 k-2@3 after@4]", "5"},
		{2, "32", "[k-1@2 k-2@3 after@4]", "5"},
		{0, "2", "[before@0 k-0@1]", "2"},
		{2, "1", "[k-1@2]", "3"},
	} {
		if got, next := pull(c.off, c.max); got != c.want || next != c.nxt {
			t.Errorf("pull at %d of %s: %s next %s, want %s next %s", c.off, c.max, got, next, c.want, c.nxt)
		}
	}
	if got := lockedQueues(t, cl, "g", "c1", 0); len(got) != 1 {
		t.Fatalf("locked %v", got)
	}
	if got, next := pull(0, "32"); got != "[before@0 k-0@1 k-1@2 k-2@3 after@4]" || next != "5" {
		t.Fatalf("orderly: %s next %s", got, next)
	}
}
