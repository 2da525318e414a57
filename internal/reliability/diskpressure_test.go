package reliability

import (
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestSmallDiskFilledKeepsEverything is the small-disk fault, simulated: a
// 6 MiB disk filled through the broker while a consumer group has read
// nothing and retention runs every 20 ms (so disk pressure is seen all the
// way up). Sends are refused with DISK_FULL before any write meets ENOSPC,
// no acknowledged message is deleted, every one becomes visible, a new
// consumer group can pull even with the disk completely full, and after
// space returns everything acknowledged is intact on a power-loss copy.
func TestSmallDiskFilledKeepsEverything(t *testing.T) {
	const capacity = 6 << 20
	e := &faultEnv{t: t, mem: vfs.NewMem()}
	if err := e.mem.MkdirAll(plDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.mem.SetCapacity(capacity)
	e.efs = vfs.NewErrorFS(e.mem)
	_, free, _ := e.mem.DiskUsage(plDir)
	e.efs.SetFreeBytes(int64(free))
	e.n = mustOpenNode(t, e.efs, plDir, nodeOptions{storeCfg: func(c *store.Config) {
		c.RetentionCheckInterval = 20 * time.Millisecond
		c.DiskReserveBytes = 1 << 20
	}})
	e.cl = e.n.dial()
	createTopicOn(t, e.n, plTopic, 2)
	if code, remark := e.commit(0); code != remoting.ResSuccess { // plGroup has read nothing
		t.Fatalf("commit: %d %s", code, remark)
	}

	refused, remark := 0, ""
	for i := 0; refused < 20; i++ {
		if i > 20_000 {
			t.Fatal("the disk never filled up")
		}
		code, rm := e.send()
		if code == remoting.ResSuccess {
			continue
		}
		refused, remark = refused+1, rm
		if !strings.Contains(rm, "DISK_FULL") || !strings.Contains(rm, "kept for dispatch and metadata") {
			t.Fatalf("send %d refused with %d %q, want DISK_FULL from the watermark", i, code, rm)
		}
	}
	if n := e.efs.NoSpaceErrors(); n != 0 {
		t.Fatalf("%d writes met ENOSPC before sends were refused", n)
	}
	perQueue := map[int32]int64{}
	for _, a := range e.acked {
		perQueue[a.queue]++
	}
	for q, n := range perQueue {
		waitFor(t, 10*time.Second, "acknowledged sends to become visible", func() bool { return e.n.st.MaxOffset(plTopic, q) >= n })
	}
	st := e.n.st.Stats()
	if st.MinOffset != 0 || st.UnconsumedDeleted != 0 {
		t.Fatalf("disk pressure deleted data nobody had read: min offset %d, unconsumed deleted %d", st.MinOffset, st.UnconsumedDeleted)
	}
	_, freeFull, _ := e.efs.DiskUsage(plDir)

	// Completely full (something else took the reserve): a new group pulls.
	e.efs.SetFreeBytes(0)
	resp, err := call(e.cl, remoting.ReqPullMessage, pullExt("cg-new", plTopic, 0, 0, 32, flagSubscription, 0), nil)
	if err != nil || resp.Code != remoting.ResSuccess || len(splitRecords(resp.Body)) == 0 {
		t.Fatalf("a new group's first pull on a full disk: %v %+v", err, resp)
	}

	e.efs.SetFreeBytes(-1)
	e.mem.SetCapacity(vfs.DefaultMemCapacity)
	waitFor(t, 10*time.Second, "sends to resume", func() bool { code, _ := e.send(); return code == remoting.ResSuccess })
	e.verifyIntact("after the small disk filled up")
	t.Logf("FAULT small disk (%d bytes) filled: %d sends acknowledged, %d refused with %q, 0 ENOSPC, 0 deleted, %d bytes free when refused; a new group pulled with 0 bytes free",
		capacity, len(e.acked), refused, tail(remark, 120), freeFull)
}
