package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// Under SYNC_FLUSH a send is answered when the store's group commit ends
// (sendCall.put): these tests check what the answer is when it ends badly.

// startEnvErrorFS starts a SYNC_FLUSH broker on an ErrorFS over the OS
// filesystem, with the store's SyncFlushTimeout set to flushTimeout.
func startEnvErrorFS(t *testing.T, flushTimeout time.Duration) (*env, *vfs.ErrorFS, *recordingObserver) {
	t.Helper()
	efs := vfs.NewErrorFS(vfs.OS{})
	e := &env{t: t, dir: t.TempDir(), fs: efs, flush: store.SyncFlush, syncFlushTimeout: flushTimeout}
	e.cfg = DefaultConfig()
	e.cfg.DataDir = e.dir
	e.start()
	t.Cleanup(e.shutdown)
	obs := &recordingObserver{}
	e.b.SetObserver(obs)
	return e, efs, obs
}

func TestDeferredSendFlushTimeout(t *testing.T) {
	e, efs, obs := startEnvErrorFS(t, 50*time.Millisecond)
	d := &fakeDedup{seen: map[string]*message.Message{}}
	e.b.SetDeduplicator(d)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("before")), remoting.ResSuccess)

	stall := make(chan struct{})
	id := efs.Inject(vfs.Rule{Ops: vfs.OpSync, Path: "commitlog", Stall: stall})
	props := message.EncodeProperties(map[string]string{"UNIQ_KEY": "SLOW1"})
	resp := cl.sendV1("T", 0, props, []byte("slow"))
	if efs.Injected(vfs.OpSync) == 0 {
		t.Fatal("no fdatasync was stalled: the timeout proved nothing")
	}
	// RocketMQ answers FLUSH_DISK_TIMEOUT with the message's identity: it
	// is stored and may yet become durable.
	wantCode(t, resp, remoting.ResFlushDiskTimeout)
	if resp.ExtFields["msgId"] == "" || resp.ExtFields["queueOffset"] != "1" || resp.ExtFields["queueId"] != "0" ||
		resp.ExtFields["transactionId"] != "SLOW1" || resp.ExtFields["MSG_REGION"] == "" {
		t.Fatalf("ext %v", resp.ExtFields)
	}
	d.mu.Lock()
	releases := d.releases
	d.mu.Unlock()
	if releases != 1 {
		t.Fatalf("de-duplication key released %d times", releases)
	}
	// The observer gets the body's size although the body's buffer was
	// reused before the answer.
	if sends, _ := obs.snapshot(); strings.Join(sends, " ") != "T/1/6/SUCCESS T/1/4/FLUSH_DISK_TIMEOUT" {
		t.Fatalf("observer saw %q", sends)
	}
	close(stall)
	efs.RemoveRule(id)
	e.waitMax("T", 0, 2) // durable after all, and delivered
}

func TestDeferredSendFailedFsync(t *testing.T) {
	e, efs, _ := startEnvErrorFS(t, 0)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("before")), remoting.ResSuccess)
	efs.InjectSyncError("commitlog")
	var items []message.BatchItem
	for i := range 3 {
		items = append(items, message.BatchItem{Body: []byte{'a' + byte(i)}})
	}
	body, err := message.EncodeBatch(items)
	if err != nil {
		t.Fatal(err)
	}
	for _, resp := range []*remoting.Command{
		cl.sendV1("T", 0, "", []byte("lost")),
		cl.invoke(remoting.ReqSendBatchMessage, map[string]string{"a": "pg", "b": "T", "c": DefaultTopic, "d": "4", "e": "0"}, body),
	} {
		// Never SUCCESS after a failed fsync (promise 1).
		wantCode(t, resp, remoting.ResServiceNotAvailable)
		if resp.ExtFields["msgId"] != "" || resp.Remark == "" {
			t.Fatalf("ext %v remark %q", resp.ExtFields, resp.Remark)
		}
	}
	e.storeFailed = true
}
