package broker

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// The send and pull headers are read with one pass over the request's
// ext fields (fieldSet); these tests compare that with reading each field
// by its own lookup, as the handlers did before, on many headers in both
// forms a request can hold them (a list, a map).

// parseSendHeaderByLookup is parseSendHeader with one LookupExt per field.
func parseSendHeaderByLookup(req *remoting.Command) (sendHeader, error) {
	k := remoting.SendKeys(req.Code)
	e := ext{req: req}
	h := sendHeader{
		producerGroup:    e.str(k[remoting.SendProducerGroup]),
		topic:            e.required(k[remoting.SendTopic]),
		defaultTopic:     e.str(k[remoting.SendDefaultTopic]),
		defaultQueueNums: e.int32(k[remoting.SendDefaultTopicQueueNums], 0, false),
		queueID:          e.int32(k[remoting.SendQueueID], -1, false),
		sysFlag:          e.int32(k[remoting.SendSysFlag], 0, false),
		bornTimestamp:    e.int64(k[remoting.SendBornTimestamp], 0, false),
		flag:             e.int32(k[remoting.SendFlag], 0, false),
		properties:       e.str(k[remoting.SendProperties]),
		reconsumeTimes:   e.int32(k[remoting.SendReconsumeTimes], 0, false),
	}
	if v := e.str(k[remoting.SendMaxReconsumeTimes]); v != "" {
		h.maxReconsumeTimes, h.hasMaxReconsume = e.int32(k[remoting.SendMaxReconsumeTimes], 0, false), true
	}
	return h, e.err
}

// parsePullByLookup is parsePull with one LookupExt per field.
func parsePullByLookup(maxPull int, req *remoting.Command) (pullRequest, error) {
	e := ext{req: req}
	p := pullRequest{
		group:          e.required("consumerGroup"),
		topic:          e.required("topic"),
		queueID:        e.int32("queueId", 0, true),
		offset:         e.int64("queueOffset", 0, true),
		maxMsgs:        int(e.int32("maxMsgNums", 32, false)),
		sysFlag:        e.int32("sysFlag", 0, false),
		commitOffset:   e.int64("commitOffset", 0, false),
		suspend:        time.Duration(e.int64("suspendTimeoutMillis", 0, false)) * time.Millisecond,
		subscription:   e.str("subscription"),
		expressionType: e.str("expressionType"),
		subVersion:     e.int64("subVersion", 0, false),
	}
	p.maxMsgs = min(max(p.maxMsgs, 1), maxPull)
	return p, e.err
}

// randomHeaderValue is a value of a kind a header field may hold: empty,
// a number in or out of int32 range, not a number, a name.
func randomHeaderValue(r *rand.Rand) string {
	switch r.IntN(7) {
	case 0:
		return ""
	case 1:
		return fmt.Sprint(r.IntN(100) - 3)
	case 2:
		return fmt.Sprint(r.Int64() - 1<<62)
	case 3:
		return "1" + fmt.Sprint(uint64(r.Uint32())<<1)
	case 4:
		return "x" + fmt.Sprint(r.IntN(9))
	case 5:
		return "TopicTest"
	}
	return "KEYS\x01k\x02UNIQ_KEY\x01" + fmt.Sprint(r.Uint64())
}

// randomFields makes a request's ext fields: some of keys (some given
// twice, the later value winning as in a decoded header), plus keys no
// handler reads, in random order.
func randomFields(r *rand.Rand, keys []string) [][2]string {
	var fields [][2]string
	for _, k := range keys {
		for range r.IntN(3) { // absent, once or twice
			fields = append(fields, [2]string{k, randomHeaderValue(r)})
		}
	}
	for range r.IntN(4) {
		fields = append(fields, [2]string{[]string{"n", "unitMode", "zz", "A", "bname", "TOPIC"}[r.IntN(6)], randomHeaderValue(r)})
	}
	r.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	return fields
}

// requestWith makes a request of code with fields as a list (AddExt, what
// the decoder makes for the codes the broker lists) or as a map.
func requestWith(code int16, fields [][2]string, asMap bool) *remoting.Command {
	req := &remoting.Command{Code: code}
	if asMap {
		req.ExtFields = map[string]string{}
	}
	for _, f := range fields {
		req.AddExt(f[0], f[1])
	}
	return req
}

func sameParse[T any](t *testing.T, what string, got, want T, gotErr, wantErr error) {
	t.Helper()
	if !reflect.DeepEqual(got, want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("%s:\n got  %+v, %v\n want %+v, %v", what, got, gotErr, want, wantErr)
	}
}

func TestParseSendHeaderMatchesLookups(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	for i := range 20000 {
		code := []int16{remoting.ReqSendMessage, remoting.ReqSendMessageV2, remoting.ReqSendBatchMessage}[i%3]
		keys := remoting.SendKeys(code)
		fields := randomFields(r, keys[:])
		for _, asMap := range []bool{false, true} {
			req := requestWith(code, fields, asMap)
			got, gotErr := parseSendHeader(req)
			want, wantErr := parseSendHeaderByLookup(req)
			sameParse(t, fmt.Sprintf("code %d map %v fields %q", code, asMap, fields), got, want, gotErr, wantErr)
		}
	}
}

func TestParsePullMatchesLookups(t *testing.T) {
	e := startEnv(t, nil)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(uint64(seed), 2))
	for range 20000 {
		fields := randomFields(r, pullKeys[:])
		for _, asMap := range []bool{false, true} {
			req := requestWith(remoting.ReqPullMessage, fields, asMap)
			got, gotErr := e.b.parsePull(req)
			want, wantErr := parsePullByLookup(e.b.cfg.MaxPullMessages, req)
			sameParse(t, fmt.Sprintf("map %v fields %q", asMap, fields), got, want, gotErr, wantErr)
		}
	}
}

// TestSendFieldMatchesKeys: SendField finds what a search of SendKeys
// finds, for every key of both dialects and keys of neither.
func TestSendFieldMatchesKeys(t *testing.T) {
	search := func(code int16, key string) int {
		for i, k := range remoting.SendKeys(code) {
			if k == key {
				return i
			}
		}
		return -1
	}
	keys := append(append([]string{"", "n", "z", "A", "aa", "Topic", "topicx"}, remoting.SendKeysV1[:]...), remoting.SendKeysV2[:]...)
	for _, code := range []int16{remoting.ReqSendMessage, remoting.ReqSendMessageV2, remoting.ReqSendBatchMessage} {
		for _, k := range keys {
			if got, want := remoting.SendField(code, k), search(code, k); got != want {
				t.Errorf("SendField(%d, %q) = %d, want %d", code, k, got, want)
			}
		}
	}
	for _, k := range append(pullKeys[:], "", "topicx", "a") {
		want := -1
		for i, pk := range pullKeys {
			if pk == k {
				want = i
			}
		}
		if got := pullField(k); got != want {
			t.Errorf("pullField(%q) = %d, want %d", k, got, want)
		}
	}
}

// FuzzParseSendHeader: for any ext fields, the one-pass read of a send
// header gives what one lookup per field gives.
func FuzzParseSendHeader(f *testing.F) {
	f.Add(int16(remoting.ReqSendMessageV2), "b\x00TopicTest\x00e\x003\x00b\x00\x00l\x00x", false)
	f.Add(int16(remoting.ReqSendMessage), "topic\x00T\x00queueId\x0099999999999\x00properties\x00p", true)
	f.Fuzz(func(t *testing.T, code int16, kv string, asMap bool) {
		var fields [][2]string
		var parts []string
		start := 0
		for i := 0; i <= len(kv); i++ {
			if i == len(kv) || kv[i] == 0 {
				parts = append(parts, kv[start:i])
				start = i + 1
			}
		}
		for i := 0; i+1 < len(parts); i += 2 {
			fields = append(fields, [2]string{parts[i], parts[i+1]})
		}
		req := requestWith(code, fields, asMap)
		got, gotErr := parseSendHeader(req)
		want, wantErr := parseSendHeaderByLookup(req)
		sameParse(t, fmt.Sprintf("code %d fields %q", code, fields), got, want, gotErr, wantErr)
	})
}
