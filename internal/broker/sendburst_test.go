package broker

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/broker/dedup"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// burstConn writes pipelined requests to the broker in one write, so
// that its reader finds them buffered together (one burst).
type burstConn struct {
	t  *testing.T
	nc net.Conn
}

func (e *env) dialBurst() *burstConn {
	e.t.Helper()
	nc, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &burstConn{t: e.t.(*testing.T), nc: nc}
}

// sendAll writes reqs in one write (opaques 1..n) and returns the
// responses by opaque.
func (bc *burstConn) sendAll(reqs []*remoting.Command) map[int32]*remoting.Command {
	bc.t.Helper()
	var buf []byte
	for i, req := range reqs {
		req.Opaque = int32(i + 1)
		var err error
		if buf, err = remoting.EncodeFrame(buf, req); err != nil {
			bc.t.Fatal(err)
		}
	}
	if _, err := bc.nc.Write(buf); err != nil {
		bc.t.Fatal(err)
	}
	out := map[int32]*remoting.Command{}
	for range reqs {
		var n [4]byte
		if _, err := io.ReadFull(bc.nc, n[:]); err != nil {
			bc.t.Fatalf("%d of %d responses: %v", len(out), len(reqs), err)
		}
		frame := make([]byte, 4+binary.BigEndian.Uint32(n[:]))
		copy(frame, n[:])
		if _, err := io.ReadFull(bc.nc, frame[4:]); err != nil {
			bc.t.Fatal(err)
		}
		resp, err := remoting.DecodeFrame(frame)
		if err != nil {
			bc.t.Fatal(err)
		}
		if out[resp.Opaque] != nil {
			bc.t.Fatalf("opaque %d answered twice", resp.Opaque)
		}
		out[resp.Opaque] = resp
	}
	return out
}

func sendV1Req(topic string, queueID int32, props string, body []byte) *remoting.Command {
	return remoting.NewRequest(remoting.ReqSendMessage, map[string]string{
		"producerGroup": "pg", "topic": topic, "defaultTopic": DefaultTopic, "defaultTopicQueueNums": "4",
		"queueId": itoa(queueID), "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
		"properties": props, "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "0", "batch": "false",
	}, body)
}

// The sends of one burst are stored in the order they came, each answered
// from its own result: one the store refuses fails alone, the others are
// stored at consecutive queue offsets with their own bodies.
func TestSendBurstAnswersEachSend(t *testing.T) {
	flushTypes(t, func(t *testing.T, flush store.FlushDiskType) {
		e := &env{t: t, dir: t.TempDir(), flush: flush, storeMutate: func(c *store.Config) { c.MaxMessageBytes = 2048 }}
		e.fs = vfs.OS{}
		e.cfg = DefaultConfig()
		e.cfg.DataDir = e.dir
		e.start()
		t.Cleanup(e.shutdown)
		bc := e.dialBurst()
		const n, bad = 40, 17
		reqs := make([]*remoting.Command, n)
		for i := range reqs {
			body := []byte("m" + strconv.Itoa(i))
			if i == bad {
				body = []byte(strings.Repeat("x", 3000)) // over the store's MaxMessageBytes
			}
			reqs[i] = sendV1Req("T", 0, "", body)
		}
		resps := bc.sendAll(reqs)
		qo := int64(0)
		for i := range reqs {
			resp := resps[int32(i+1)]
			if i == bad {
				wantCode(t, resp, remoting.ResMessageIllegal)
				continue
			}
			wantCode(t, resp, remoting.ResSuccess)
			if got := resp.ExtFields["queueOffset"]; got != itoa(qo) {
				t.Fatalf("send %d: queueOffset %s, want %d", i, got, qo)
			}
			_, phys, err := message.ParseOffsetMsgID(resp.ExtFields["msgId"])
			if err != nil {
				t.Fatal(err)
			}
			if m := e.storedAt(phys); string(m.Body) != "m"+strconv.Itoa(i) {
				t.Fatalf("send %d: stored %q", i, m.Body)
			}
			qo++
		}
	})
}

// Two sends of one key in one burst, with the de-duplicator on: the
// second waits for the first, which is not stored yet but held in the
// burst; the burst is stored first (core.BeforeWait), so the second is
// answered as a duplicate of the first instead of waiting for ever.
func TestSendBurstDuplicateKey(t *testing.T) {
	e := startEnvFlush(t, store.SyncFlush, nil)
	d, err := dedup.New(dedup.Config{Window: time.Minute, Index: e.st, StartsEmpty: true})
	if err != nil {
		t.Fatal(err)
	}
	e.b.SetDeduplicator(d)
	bc := e.dialBurst()
	props := message.EncodeProperties(map[string]string{message.PropUniqKey: "K1"})
	other := message.EncodeProperties(map[string]string{message.PropUniqKey: "K2"})
	resps := bc.sendAll([]*remoting.Command{
		sendV1Req("T", 0, other, []byte("a")),
		sendV1Req("T", 0, props, []byte("b")),
		sendV1Req("T", 0, props, []byte("b")),
		sendV1Req("T", 0, "", []byte("c")),
	})
	for _, resp := range resps {
		wantCode(t, resp, remoting.ResSuccess)
	}
	if resps[2].ExtFields["msgId"] != resps[3].ExtFields["msgId"] || resps[2].ExtFields["queueOffset"] != "1" {
		t.Fatalf("the resend: %v, the first: %v", resps[3].ExtFields, resps[2].ExtFields)
	}
	if resps[4].ExtFields["queueOffset"] != "2" {
		t.Fatalf("the send after them: %v", resps[4].ExtFields)
	}
	e.waitMax("T", 0, 3)
	if got := e.st.MaxOffset("T", 0); got != 3 {
		t.Fatalf("%d messages stored, want 3", got)
	}
	if s := d.Stats(); s.Waits == 0 {
		t.Fatal("the resend did not wait for the first send: the test proved nothing")
	}
}
