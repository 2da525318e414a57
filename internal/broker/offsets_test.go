package broker

import (
	"testing"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/vfs"
)

func queryOffset(cl *client, group, topic string, q int32) (int16, string) {
	resp := cl.invoke(remoting.ReqQueryConsumerOffset, map[string]string{"consumerGroup": group, "topic": topic, "queueId": itoa(q)}, nil)
	return resp.Code, resp.ExtFields["offset"]
}

func TestConsumerOffsetsUpdateQueryAndSurviveRestart(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	upd := map[string]string{"consumerGroup": "g", "topic": "T", "queueId": "0", "commitOffset": "1"}
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, upd, nil), remoting.ResSuccess)
	if code, off := queryOffset(cl, "g", "T", 0); code != remoting.ResSuccess || off != "1" {
		t.Fatalf("query -> %d %q", code, off)
	}
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "Nope", "queueId": "0", "commitOffset": "1"}, nil), remoting.ResTopicNotExist)
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "T", "queueId": "0"}, nil), remoting.ResInvalidParameter)
	e.restart()
	cl = e.dial()
	if code, off := queryOffset(cl, "g", "T", 0); code != remoting.ResSuccess || off != "1" {
		t.Fatalf("after restart query -> %d %q", code, off)
	}
}

func TestQueryOffsetZeroIfYoung(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	e.waitMax("T", 0, 1)
	if code, off := queryOffset(cl, "new", "T", 0); code != remoting.ResSuccess || off != "0" {
		t.Fatalf("young queue -> %d %q, want 0 \"0\"", code, off)
	}
	resp := cl.invoke(remoting.ReqQueryConsumerOffset, map[string]string{"consumerGroup": "new", "topic": "T", "queueId": "0", "setZeroIfNotFound": "false"}, nil)
	wantCode(t, resp, remoting.ResQueryNotFound)
}

func TestQueryOffsetNotFoundWhenQueueIsOld(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.YoungQueueBytes = 1 })
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	wantCode(t, cl.sendV1("T", 0, "", []byte("y")), remoting.ResSuccess)
	waitFor(t, "dispatch", func() bool { return e.st.MaxOffset("T", 0) == 2 })
	if code, _ := queryOffset(cl, "new", "T", 0); code != remoting.ResQueryNotFound {
		t.Fatalf("old queue -> %d, want 22", code)
	}
}

func TestOffsetLookups(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	for i := 0; i < 3; i++ {
		wantCode(t, cl.sendV1("T", 1, "", []byte("x")), remoting.ResSuccess)
	}
	e.waitMax("T", 1, 3)
	get := func(code int16, ext map[string]string, key string) string {
		resp := cl.invoke(code, ext, nil)
		wantCode(t, resp, remoting.ResSuccess)
		return resp.ExtFields[key]
	}
	tq := map[string]string{"topic": "T", "queueId": "1"}
	if v := get(remoting.ReqGetMaxOffset, tq, "offset"); v != "3" {
		t.Errorf("max %s", v)
	}
	if v := get(remoting.ReqGetMinOffset, tq, "offset"); v != "0" {
		t.Errorf("min %s", v)
	}
	if v := get(remoting.ReqSearchOffsetByTimestamp, map[string]string{"topic": "T", "queueId": "1", "timestamp": "0"}, "offset"); v != "0" {
		t.Errorf("search(0) %s", v)
	}
	if v := get(remoting.ReqSearchOffsetByTimestamp, map[string]string{"topic": "T", "queueId": "1", "timestamp": "99999999999999"}, "offset"); v != "3" {
		t.Errorf("search(future) %s", v)
	}
	if v := get(remoting.ReqGetEarliestMsgStoretime, tq, "timestamp"); v == "" || v == "0" || v == "-1" {
		t.Errorf("earliest %s", v)
	}
	if v := get(remoting.ReqGetMaxOffset, map[string]string{"topic": "Nope", "queueId": "0"}, "offset"); v != "0" {
		t.Errorf("max of unknown %s", v)
	}
}

// TestOffsetsAfterPowerLoss: offsets flushed before a power loss survive it;
// a commit after the last flush may be lost (re-delivery, never loss), and
// the metadata files are never torn.
func TestOffsetsAfterPowerLoss(t *testing.T) {
	mem := vfs.NewMem()
	e := &env{t: t, dir: "/data", fs: mem}
	if err := mem.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	e.cfg = DefaultConfig()
	e.cfg.DataDir = e.dir
	e.start()
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	upd := func(off string) {
		wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "T", "queueId": "0", "commitOffset": off}, nil), remoting.ResSuccess)
	}
	upd("1")
	if err := e.b.core.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	upd("5") // not flushed
	// Power loss now: the clone holds only what was durable. The old
	// instances shut down on the original filesystem.
	clone := mem.CrashClone()
	e.shutdown()
	e.fs = clone
	e.start()
	t.Cleanup(e.shutdown)
	cl = e.dial()
	if code, off := queryOffset(cl, "g", "T", 0); code != remoting.ResSuccess || off != "1" {
		t.Fatalf("after power loss: %d %q, want the flushed offset 1", code, off)
	}
	if _, ok := e.b.Topic("T"); !ok {
		t.Fatal("auto-created topic lost although its creation was acknowledged")
	}
}
