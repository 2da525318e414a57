package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// splitRecords decodes a body of concatenated stored records.
func splitRecords(t *testing.T, body []byte) []*message.Message {
	t.Helper()
	var out []*message.Message
	for len(body) > 0 {
		if len(body) < 4 {
			t.Fatalf("trailing %d bytes", len(body))
		}
		n := int(binary.BigEndian.Uint32(body))
		if n > len(body) || n < message.MinRecordBytes {
			t.Fatalf("bad record size %d of %d", n, len(body))
		}
		m, err := message.Decode(body[:n])
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		out = append(out, m)
		body = body[n:]
	}
	return out
}

func TestSendV1StoresMessageAndAnswersExt(t *testing.T) {
	flushTypes(t, func(t *testing.T, flush store.FlushDiskType) {
		e := startEnvFlush(t, flush, nil)
		cl := e.dial()
		props := message.EncodeProperties(map[string]string{"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": "U1"})
		resp := cl.sendV1("T1", 2, props, []byte("hello"))
		wantCode(t, resp, remoting.ResSuccess)
		for _, k := range []string{"msgId", "queueId", "queueOffset", "transactionId", "MSG_REGION", "TRACE_ON"} {
			if _, ok := resp.ExtFields[k]; !ok {
				t.Errorf("response lacks ext %s: %v", k, resp.ExtFields)
			}
		}
		if resp.ExtFields["queueId"] != "2" || resp.ExtFields["queueOffset"] != "0" || resp.ExtFields["transactionId"] != "U1" {
			t.Fatalf("ext = %v", resp.ExtFields)
		}
		host, phys, err := message.ParseOffsetMsgID(resp.ExtFields["msgId"])
		if err != nil || host.String() != e.addr {
			t.Fatalf("msgId %q -> %v %v, want host %s", resp.ExtFields["msgId"], host, err, e.addr)
		}
		m := e.storedAt(phys)
		if m.Topic != "T1" || m.QueueID != 2 || string(m.Body) != "hello" {
			t.Fatalf("stored %+v", m)
		}
		if v, _ := message.Property(m.Properties, message.PropCluster); v != "DefaultCluster" {
			t.Errorf("CLUSTER = %q", v)
		}
		if v, _ := message.Property(m.Properties, message.PropUniqKey); v != "U1" {
			t.Errorf("UNIQ_KEY = %q (the client's must be kept)", v)
		}
		if m.StoreHost.String() != e.addr || !m.BornHost.Addr().IsLoopback() {
			t.Errorf("hosts born=%v store=%v", m.BornHost, m.StoreHost)
		}
		tc, ok := e.b.Topic("T1")
		if !ok || tc.WriteQueueNums != 4 || tc.Perm != core.PermRW {
			t.Fatalf("auto-created topic %+v %v", tc, ok)
		}
	})
}

func TestSendGeneratesUniqKey(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	resp := cl.sendV1("T1", 0, "", []byte("x"))
	wantCode(t, resp, remoting.ResSuccess)
	id := resp.ExtFields["transactionId"]
	if len(id) != 32 {
		t.Fatalf("generated UNIQ_KEY %q", id)
	}
	resp2 := cl.sendV1("T1", 0, "", []byte("x"))
	if resp2.ExtFields["transactionId"] == id {
		t.Fatal("two messages got the same UNIQ_KEY")
	}
}

func TestSendV2ShortHeader(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	resp := cl.invoke(remoting.ReqSendMessageV2, map[string]string{
		"a": "pg", "b": "T2", "c": DefaultTopic, "d": "2", "e": "1", "f": "0", "g": "1", "h": "7",
		"i": message.EncodeProperties(map[string]string{"TAGS": "x"}), "j": "0", "k": "false", "m": "false",
	}, []byte("v2"))
	wantCode(t, resp, remoting.ResSuccess)
	tc, _ := e.b.Topic("T2")
	if tc.WriteQueueNums != 2 {
		t.Fatalf("queues = %d, want the requested 2", tc.WriteQueueNums)
	}
}

func TestSendBatch(t *testing.T) {
	flushTypes(t, func(t *testing.T, flush store.FlushDiskType) {
		e := startEnvFlush(t, flush, nil)
		cl := e.dial()
		var items []message.BatchItem
		for i := 0; i < 3; i++ {
			items = append(items, message.BatchItem{Body: []byte{'a' + byte(i)}, Properties: message.EncodeProperties(map[string]string{"KEYS": "b"})})
		}
		body, err := message.EncodeBatch(items)
		if err != nil {
			t.Fatal(err)
		}
		resp := cl.invoke(remoting.ReqSendBatchMessage, map[string]string{"a": "pg", "b": "TB", "c": DefaultTopic, "d": "4", "e": "0", "f": "0", "g": "1", "h": "0", "i": "", "j": "0", "k": "false", "m": "true"}, body)
		wantCode(t, resp, remoting.ResSuccess)
		if ids := strings.Split(resp.ExtFields["msgId"], ","); len(ids) != 3 {
			t.Fatalf("msgId %q", resp.ExtFields["msgId"])
		}
		e.waitMax("TB", 0, 3)
		// A batch to a retry topic is refused.
		resp = cl.invoke(remoting.ReqSendBatchMessage, map[string]string{"a": "pg", "b": "%RETRY%g", "c": DefaultTopic, "d": "4", "e": "0"}, body)
		wantCode(t, resp, remoting.ResMessageIllegal)
		// Garbage is a clear error, not a panic.
		resp = cl.invoke(remoting.ReqSendBatchMessage, map[string]string{"a": "pg", "b": "TB", "e": "0"}, []byte{0, 0, 0, 99, 1})
		wantCode(t, resp, remoting.ResMessageIllegal)
	})
}

func TestSendErrors(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.MaxMessageSize = 1024 })
	cl := e.dial()
	cases := []struct {
		name  string
		topic string
		queue int32
		props string
		body  []byte
		code  int16
	}{
		{"oversized body", "T", 0, "", bytes.Repeat([]byte("x"), 1025), remoting.ResMessageIllegal},
		{"bad topic", "a b", 0, "", []byte("x"), remoting.ResInvalidParameter},
		{"long topic", strings.Repeat("t", 128), 0, "", []byte("x"), remoting.ResInvalidParameter},
		{"schedule topic", "SCHEDULE_TOPIC_XXXX", 0, "", []byte("x"), remoting.ResNoPermission},
		{"queue out of range", "T", 9, "", []byte("x"), remoting.ResInvalidParameter},
		{"properties too long", "T", 0, "K\x01" + strings.Repeat("v", 40000) + "\x02", []byte("x"), remoting.ResMessageIllegal},
		{"delay without scheduler", "T", 0, "DELAY\x013\x02", []byte("x"), remoting.ResMessageIllegal},
		{"transaction without engine", "T", 0, "TRAN_MSG\x01true\x02", []byte("x"), remoting.ResNoPermission},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := cl.sendV1(tc.topic, tc.queue, tc.props, tc.body)
			wantCode(t, resp, tc.code)
			if resp.Remark == "" {
				t.Error("error without a remark")
			}
			if resp.ExtFields["MSG_REGION"] == "" {
				t.Error("error response without MSG_REGION")
			}
		})
	}
}

func TestSendTopicNotExistWithoutAutoCreate(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.AutoCreateTopicEnable = false })
	cl := e.dial()
	resp := cl.sendV1("Nope", 0, "", []byte("x"))
	wantCode(t, resp, remoting.ResTopicNotExist)
	if _, ok := e.b.Topic(DefaultTopic); ok {
		t.Fatal("TBW102 registered with auto-create off")
	}
}

func TestSendRetryTopicOverMaxGoesToDLQ(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	ext := map[string]string{
		"producerGroup": "CLIENT_INNER_PRODUCER", "topic": "%RETRY%g1", "defaultTopic": DefaultTopic,
		"defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": "1", "flag": "0",
		"properties": "", "reconsumeTimes": "3", "maxReconsumeTimes": "2",
	}
	resp := cl.invoke(remoting.ReqSendMessage, ext, []byte("dead"))
	wantCode(t, resp, remoting.ResSuccess)
	e.waitMax("%DLQ%g1", 0, 1)
	ext["reconsumeTimes"] = "2"
	resp = cl.invoke(remoting.ReqSendMessage, ext, []byte("retry"))
	wantCode(t, resp, remoting.ResSuccess)
	e.waitMax("%RETRY%g1", 0, 1)
}

type fakeScheduler struct {
	st    *store.Store
	mu    sync.Mutex
	calls []schedCall
}

type schedCall struct {
	topic string
	level int32
	at    int64
}

func (f *fakeScheduler) MaxDelayLevel() int32 { return 18 }

func (f *fakeScheduler) Schedule(ctx context.Context, m *message.Message, level int32, at int64) store.PutResult {
	f.mu.Lock()
	f.calls = append(f.calls, schedCall{m.Topic, level, at})
	f.mu.Unlock()
	return f.st.PutMessage(ctx, m)
}

func (f *fakeScheduler) get() []schedCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]schedCall(nil), f.calls...)
}

func TestSendDelayGoesToScheduler(t *testing.T) {
	e := startEnv(t, nil)
	fs := &fakeScheduler{st: e.st}
	e.b.SetScheduler(fs)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "DELAY\x0199\x02", []byte("x")), remoting.ResSuccess)
	wantCode(t, cl.sendV1("T", 0, "TIMER_DELAY_SEC\x0160\x02", []byte("x")), remoting.ResSuccess)
	wantCode(t, cl.sendV1("T", 0, "TIMER_DELAY_SEC\x01999999\x02", []byte("x")), remoting.ResMessageIllegal)
	calls := fs.get()
	if len(calls) != 2 || calls[0].level != 18 || calls[1].level != 0 || calls[1].at == 0 {
		t.Fatalf("scheduler calls %+v", calls)
	}
}

func TestPutStatusCodes(t *testing.T) {
	for s, want := range map[store.PutStatus]int16{
		store.PutOK: 0, store.PutFlushDiskTimeout: 10, store.PutServiceNotAvailable: 14, store.PutDiskFull: 14,
		store.PutMessageIllegal: 13, store.PutPropertiesTooLong: 13, store.PutUnknownError: 1,
	} {
		if got := putStatusCode(s); got != want {
			t.Errorf("%v -> %d, want %d", s, got, want)
		}
	}
}

var _ = remoting.FlagOneway

type observingScheduler struct {
	fakeScheduler
	seen chan string
}

func (o *observingScheduler) OnDispatch(topic string, queueID int32, queueOffset int64, tagsCode int64) {
	select {
	case o.seen <- topic:
	default:
	}
}

func TestSchedulerObservesDispatch(t *testing.T) {
	e := startEnv(t, nil)
	obs := &observingScheduler{fakeScheduler: fakeScheduler{st: e.st}, seen: make(chan string, 16)}
	e.b.SetScheduler(obs)
	wantCode(t, e.dial().sendV1("Obs", 0, "", []byte("x")), remoting.ResSuccess)
	waitFor(t, "dispatch event", func() bool {
		select {
		case topic := <-obs.seen:
			return topic == "Obs"
		default:
			return false
		}
	})
	wantCode(t, e.dial().sendV1("KEEL_SYS_TIMER", 0, "", []byte("x")), remoting.ResNoPermission)
}

func TestSendTimerDeliverMsAbsolute(t *testing.T) {
	e := startEnv(t, nil)
	fs := &fakeScheduler{st: e.st}
	e.b.SetScheduler(fs)
	cl := e.dial()
	at := time.Now().Add(time.Minute).UnixMilli()
	wantCode(t, cl.sendV1("T", 0, "TIMER_DELIVER_MS\x01"+itoa(at)+"\x02", []byte("x")), remoting.ResSuccess)
	far := time.Now().Add(4 * 24 * time.Hour).UnixMilli()
	wantCode(t, cl.sendV1("T", 0, "TIMER_DELIVER_MS\x01"+itoa(far)+"\x02", []byte("x")), remoting.ResMessageIllegal)
	past := time.Now().Add(-time.Minute).UnixMilli()
	wantCode(t, cl.sendV1("T", 0, "TIMER_DELIVER_MS\x01"+itoa(past)+"\x02", []byte("x")), remoting.ResSuccess)
	if calls := fs.get(); len(calls) != 1 || calls[0].at != at {
		t.Fatalf("scheduler calls %+v, want one at %d", calls, at)
	}
}

// fakeDedup remembers stored messages by (topic, key).
type fakeDedup struct {
	mu       sync.Mutex
	seen     map[string]*message.Message
	releases int
}

func (f *fakeDedup) Check(ctx context.Context, topic, key string) (*message.Message, func(*message.Message, store.PutResult), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.seen[topic+"#"+key]; m != nil {
		return m, nil, nil
	}
	return nil, func(m *message.Message, res store.PutResult) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.releases++
		if m != nil && res.Status == store.PutOK {
			c := *m // lent: copied, not kept
			f.seen[topic+"#"+key] = &c
		}
	}, nil
}

func TestSendDeduplicator(t *testing.T) {
	flushTypes(t, func(t *testing.T, flush store.FlushDiskType) {
		e := startEnvFlush(t, flush, nil)
		d := &fakeDedup{seen: map[string]*message.Message{}}
		e.b.SetDeduplicator(d)
		cl := e.dial()
		props := message.EncodeProperties(map[string]string{"UNIQ_KEY": "DUP1"})
		first := cl.sendV1("T", 1, props, []byte("x"))
		wantCode(t, first, remoting.ResSuccess)
		again := cl.sendV1("T", 1, props, []byte("x"))
		wantCode(t, again, remoting.ResSuccess)
		for _, k := range []string{"msgId", "queueId", "queueOffset", "transactionId"} {
			if first.ExtFields[k] != again.ExtFields[k] {
				t.Errorf("%s: first %q, duplicate %q", k, first.ExtFields[k], again.ExtFields[k])
			}
		}
		e.waitMax("T", 1, 1)
		if e.st.MaxOffset("T", 1) != 1 {
			t.Fatal("duplicate stored")
		}
		// Broker-generated keys are not checked; failed sends still release.
		wantCode(t, cl.sendV1("T", 1, "", []byte("y")), remoting.ResSuccess)
		wantCode(t, cl.sendV1("T", 1, message.EncodeProperties(map[string]string{"UNIQ_KEY": "D2", "DELAY": "3"}), []byte("z")), remoting.ResMessageIllegal)
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.releases != 2 {
			t.Fatalf("releases %d, want 2", d.releases)
		}
	})
}
