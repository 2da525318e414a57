package reliability

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// faultEnv is a node on ErrorFS over MemFS with a raw client and the list
// of acknowledged sends.
type faultEnv struct {
	t     *testing.T
	mem   *vfs.MemFS
	efs   *vfs.ErrorFS
	n     *node
	cl    *remoting.Client
	acked []plAck
	seq   int
}

func newFaultEnv(t *testing.T) *faultEnv {
	t.Helper()
	e := &faultEnv{t: t, mem: vfs.NewMem()}
	if err := e.mem.MkdirAll(plDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := e.mem.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	e.efs = vfs.NewErrorFS(e.mem)
	e.open()
	createTopicOn(t, e.n, plTopic, 2)
	return e
}

func faultNodeOptions() nodeOptions {
	return nodeOptions{storeCfg: func(c *store.Config) {
		c.RetentionCheckInterval = 20 * time.Millisecond
		c.SyncFlushTimeout = 2 * time.Second
	}}
}

func (e *faultEnv) open() {
	e.t.Helper()
	e.n = mustOpenNode(e.t, e.efs, plDir, faultNodeOptions())
	e.cl = e.n.dial()
}

// restart closes the node (errors from the fault are expected) and opens a
// new one on the same filesystem, without faults.
func (e *faultEnv) restart() {
	e.t.Helper()
	e.cl.Close()
	e.n.close()
	e.efs.ClearRules()
	e.efs.SetFreeBytes(-1)
	e.open()
}

// send sends one message; it returns the response code and remark.
func (e *faultEnv) send() (int16, string) {
	e.t.Helper()
	e.seq++
	key := "F" + strconv.Itoa(e.seq)
	q := int32(e.seq % 2)
	resp, err := call(e.cl, remoting.ReqSendMessage, sendExt(plTopic, q,
		message.EncodeProperties(map[string]string{message.PropUniqKey: key, message.PropKeys: "k" + key})), makeBody(key))
	if err != nil {
		e.t.Fatalf("send: %v (the broker must answer, not drop the connection)", err)
	}
	if resp.Code == remoting.ResSuccess {
		off, _ := resp.ExtInt64("queueOffset")
		qid, _ := resp.ExtInt32("queueId")
		e.acked = append(e.acked, plAck{key: key, queue: qid, offset: off})
	}
	return resp.Code, resp.Remark
}

func (e *faultEnv) mustSend() {
	e.t.Helper()
	if code, remark := e.send(); code != remoting.ResSuccess {
		e.t.Fatalf("send: code %d %q", code, remark)
	}
}

// commit commits a consumer offset for queue 0.
func (e *faultEnv) commit(off int64) (int16, string) {
	resp, err := call(e.cl, remoting.ReqUpdateConsumerOffset, map[string]string{
		"consumerGroup": plGroup, "topic": plTopic, "queueId": "0", "commitOffset": strconv.FormatInt(off, 10)}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Code, resp.Remark
}

// pullAll pulls queue 0 from offset 0 and returns the number of messages.
func (e *faultEnv) pullAll() int {
	e.t.Helper()
	resp, err := call(e.cl, remoting.ReqPullMessage, pullExt(plGroup, plTopic, 0, 0, 1000, flagSubscription, 0), nil)
	if err != nil {
		e.t.Fatalf("pull: %v", err)
	}
	if resp.Code != remoting.ResSuccess {
		return 0
	}
	return len(splitRecords(resp.Body))
}

// ackedInQueue0 counts acknowledged sends to queue 0.
func (e *faultEnv) ackedInQueue0() int {
	n := 0
	for _, a := range e.acked {
		if a.queue == 0 {
			n++
		}
	}
	return n
}

// verifyIntact checks every acknowledged message on a power-loss copy of
// the filesystem with a fresh store, and runs the offline check.
func (e *faultEnv) verifyIntact(what string) {
	e.t.Helper()
	clone := e.mem.CrashClone()
	rep, err := store.Check(nodeStoreConfig(clone, plDir))
	if err != nil || !rep.OK() {
		e.t.Fatalf("%s: offline check: %v %v", what, err, rep.Problems)
	}
	st, err := store.Open(nodeStoreConfig(clone, plDir))
	if err != nil {
		e.t.Fatalf("%s: reopen: %v", what, err)
	}
	defer st.Close()
	for _, a := range e.acked {
		res, err := st.GetMessage(plTopic, a.queue, a.offset, 1, 1<<20, nil)
		if err != nil || len(res.Records) != 1 || string(message.View(res.Records[0]).UniqKey()) != a.key {
			e.t.Fatalf("%s: acknowledged %s at %d/%d damaged or lost (%v)", what, a.key, a.queue, a.offset, err)
		}
		body := message.View(res.Records[0]).Body()
		if string(body) != string(makeBody(a.key)) {
			e.t.Fatalf("%s: body of %s changed", what, a.key)
		}
		res.Release()
	}
}

var errNoSpace = syscall.ENOSPC

// diskFaultCases: one per kind of file the broker writes.
var diskFaultCases = []struct {
	name string
	path string // ErrorFS path substring
	// writes triggers a write of that file kind.
	trigger string // "send", "commit", "topic"
	// storeWide: a failed fsync there makes the store read-only until
	// restart (documented in the store package). ENOSPC on a write never
	// does: writing resumes by itself everywhere.
	storeWide bool
}{
	{"commitlog", "/commitlog/", "send", true},
	{"consumequeue", "/consumequeue/", "send", true},
	{"index", "/index/", "send", true},
	{"checkpoint", "/checkpoint", "send", true},
	{"consumer offsets", "consumerOffset.json", "commit", false},
	{"topic config", "topics.json", "topic", false},
}

// TestDiskFullEveryWrite: ENOSPC at each kind of write. Sends fail with a
// clear error (never an ack for a message not stored), reads keep working,
// nothing stored is damaged, the store never turns read-only, and once space
// returns writing resumes by itself, without a restart: the CommitLog
// append is retried by the next send, ConsumeQueue, index and checkpoint
// writes by the store's next dispatch or flush round, the broker's metadata
// files by their next write.
func TestDiskFullEveryWrite(t *testing.T) {
	for _, c := range diskFaultCases {
		t.Run(c.name, func(t *testing.T) {
			e := newFaultEnv(t)
			for range 5 {
				e.mustSend()
			}
			e.commit(1)
			visible := e.waitVisible()
			e.efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: c.path, Err: errNoSpace})
			failed, remark := e.exercise(c.trigger)
			if err := e.storeErr(); err != nil {
				t.Fatalf("ENOSPC made the store read-only: %v", err)
			}
			if c.path == "/commitlog/" && (failed == 0 || !strings.Contains(remark, "DISK_FULL")) {
				t.Fatalf("sends on a full disk: %d failed, remark %q; want DISK_FULL", failed, remark)
			}
			e.faultRound(t, c.name, "ENOSPC", visible, failed, remark, c.trigger, false)
		})
	}
}

// TestFailedFsyncEveryFile: an fsync error at each kind of file. A send
// whose CommitLog fsync failed is never acknowledged, and the store then
// refuses writes until restart even when the disk works again (the page
// cache cannot be trusted after a failed fsync); the broker's metadata
// files are written to a fresh temporary file each time, so they recover
// by themselves. Reads keep working; nothing stored is damaged.
func TestFailedFsyncEveryFile(t *testing.T) {
	for _, c := range diskFaultCases {
		t.Run(c.name, func(t *testing.T) {
			e := newFaultEnv(t)
			for range 5 {
				e.mustSend()
			}
			e.commit(1)
			visible := e.waitVisible()
			e.efs.Inject(vfs.Rule{Ops: vfs.OpSync, Path: c.path})
			failed, remark := e.exercise(c.trigger)
			if c.path == "/commitlog/" && failed == 0 {
				t.Fatal("sends acknowledged although every CommitLog fsync failed")
			}
			if c.storeWide {
				// Read-only until restart, even with a working disk.
				waitFor(t, 10*time.Second, "the store to turn read-only after a failed fsync", func() bool { return e.storeErr() != nil })
				e.efs.ClearRules()
				if code, _ := e.send(); code == remoting.ResSuccess {
					t.Fatal("a send was acknowledged after a failed fsync without a restart")
				}
			}
			e.faultRound(t, c.name, "fsync error", visible, failed, remark, c.trigger, c.storeWide)
		})
	}
}

// faultRound checks reads and integrity during a fault, removes it and
// checks that writing resumes (by itself, or after a restart for
// store-wide faults), and that everything acknowledged is intact.
func (e *faultEnv) faultRound(t *testing.T, name, fault string, visible, failed int, remark, trigger string, storeWide bool) {
	t.Helper()
	if n := e.pullAll(); n < visible {
		t.Fatalf("reads during the fault: %d messages, want >= %d", n, visible)
	}
	e.verifyIntact("during the fault")
	e.efs.ClearRules()
	resumed := e.resumes(trigger, storeWide)
	if resumed {
		e.waitVisible() // the dispatcher caught up without a restart
	} else {
		e.restart()
		e.resumesOrFail(trigger)
		// The send that proved writing resumed is acknowledged before the
		// dispatcher makes it visible: wait for it, as for the rest.
		e.waitVisible()
	}
	e.verifyIntact("after the fault")
	t.Logf("FAULT %s %s: failed_ops=%d resumed_without_restart=%v injected=%d acked=%d remark=%q",
		name, fault, failed, resumed, e.efs.Injected(vfs.OpAll), len(e.acked), tail(remark, 160))
}

// waitVisible waits until every acknowledged send to queue 0 can be pulled
// and returns their number.
func (e *faultEnv) waitVisible() int {
	e.t.Helper()
	want := e.ackedInQueue0()
	waitFor(e.t, 10*time.Second, "acknowledged sends to become visible", func() bool { return e.pullAll() >= want })
	return want
}

func (e *faultEnv) storeErr() error { return e.n.st.Err() }

// exercise runs operations of kind trigger while a fault is injected and
// checks that each either succeeds (the fault was not in its path) or
// fails with a clear error; it returns the failures and the last remark.
func (e *faultEnv) exercise(trigger string) (failed int, remark string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	after := 0 // operations since the first injected fault
	for i := 0; after < 10; i++ {
		if e.efs.Injected(vfs.OpAll) > 0 {
			after++
		} else if time.Now().After(deadline) {
			e.t.Fatal("the fault was never hit")
		}
		var code int16
		var rm string
		switch trigger {
		case "send":
			code, rm = e.send()
			time.Sleep(time.Millisecond) // give the 20ms queue flush and checkpoint a chance to run
		case "commit":
			code, rm = e.commit(int64(2 + i))
			time.Sleep(5 * time.Millisecond) // let the 20ms offset flush run into the fault
		case "topic":
			resp, err := call(e.cl, remoting.ReqUpdateAndCreateTopic, map[string]string{
				"topic": fmt.Sprintf("FT%d", i), "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}, nil)
			if err != nil {
				e.t.Fatal(err)
			}
			code, rm = resp.Code, resp.Remark
		}
		if code != remoting.ResSuccess {
			failed++
			remark = rm
			if rm == "" {
				e.t.Errorf("failure code %d without a remark", code)
			}
		}
	}
	return failed, remark
}

// resumes reports whether operations of kind trigger succeed again within a
// few seconds after the fault was removed. want says whether they must
// (false: a restart is allowed).
func (e *faultEnv) resumes(trigger string, storeWide bool) bool {
	e.t.Helper()
	if storeWide && e.storeErr() != nil {
		// Read-only until restart (store package doc): it must stay so.
		if e.tryOnce(trigger) {
			e.t.Fatal("the store accepted a write while it reports being read-only")
		}
		return false
	}
	ok := poll(5*time.Second, func() bool { return e.tryOnce(trigger) })
	if !ok && !storeWide {
		e.t.Fatalf("%s does not resume by itself after the fault is gone", trigger)
	}
	return ok
}

func (e *faultEnv) resumesOrFail(trigger string) {
	e.t.Helper()
	if !poll(5*time.Second, func() bool { return e.tryOnce(trigger) }) {
		e.t.Fatalf("%s does not work after a restart", trigger)
	}
}

func (e *faultEnv) tryOnce(trigger string) bool {
	switch trigger {
	case "commit":
		// Durable: the offset file on a power-loss copy holds the offset.
		e.commit(99)
		data, ok := readAll(e.mem.CrashClone(), filepath.Join(plDir, "config", "consumerOffset.json"))
		return ok && strings.Contains(string(data), "99")
	case "topic":
		name := fmt.Sprintf("FTR%d", e.seq)
		e.seq++
		resp, err := call(e.cl, remoting.ReqUpdateAndCreateTopic, map[string]string{
			"topic": name, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}, nil)
		return err == nil && resp.Code == remoting.ResSuccess
	default:
		code, _ := e.send()
		return code == remoting.ResSuccess
	}
}

// TestDiskNearlyFullRefusesAndResumes: when free space drops below the
// hard limit (diskSpaceWarningLevelRatio) the store refuses sends with
// DISK_FULL before any write fails, reads keep working, and sends resume by
// themselves once space returns.
func TestDiskNearlyFullRefusesAndResumes(t *testing.T) {
	e := newFaultEnv(t)
	for range 5 {
		e.mustSend()
	}
	visible := e.waitVisible()
	e.efs.SetFreeBytes(4 << 20) // 4 MiB of a 1 TiB disk: far above the 90% limit
	var remark string
	waitFor(t, 10*time.Second, "sends to be refused", func() bool {
		code, rm := e.send()
		remark = rm
		return code != remoting.ResSuccess
	})
	if !strings.Contains(remark, "DISK_FULL") {
		t.Errorf("refusal remark %q does not say DISK_FULL", remark)
	}
	if n := e.pullAll(); n < visible {
		t.Fatalf("reads while the disk is full: %d, want >= %d", n, visible)
	}
	if e.efs.NoSpaceErrors() != 0 {
		t.Errorf("%d writes hit ENOSPC: the watermark should refuse first", e.efs.NoSpaceErrors())
	}
	e.efs.SetFreeBytes(-1)
	waitFor(t, 10*time.Second, "sends to resume", func() bool { code, _ := e.send(); return code == remoting.ResSuccess })
	e.verifyIntact("after the disk-full period")
	t.Logf("FAULT disk nearly full: refused with %q, resumed by itself", tail(remark, 160))
}

// TestCorruptionAtRestReported: a CommitLog record damaged on disk while
// the broker is stopped is reported by `keel check` (exit 1, naming the
// file) and makes `keel serve` refuse to start with an error naming the
// segment, instead of serving around it; a damaged ConsumeQueue entry is
// reported by `keel check`.
func TestCorruptionAtRestReported(t *testing.T) {
	bin := keelBinary(t)
	dir := t.TempDir()
	conf := crashConf(t, "SYNC_FLUSH")
	cfg := store.DefaultConfig(dir)
	cfg.CommitLogSegmentBytes, cfg.ConsumeQueueSegmentEntries, cfg.MaxMessageBytes = crashSegmentBytes, crashCQEntries, crashMaxMsgBytes
	fillOSStore(t, cfg, 200)
	p := &keelProc{t: t, bin: bin, dir: dir, conf: conf}
	if code, out := p.check(); code != 0 {
		t.Fatalf("keel check of a sound store: exit %d\n%s", code, out)
	}

	// A ConsumeQueue entry pointing elsewhere.
	cq := filepath.Join(dir, "consumequeue", "T", "0", fmt.Sprintf("%020d", 0))
	flipByte(t, cq, 20*3+2)
	code, out := p.check()
	if code != 1 || !strings.Contains(out, "consumequeue") {
		t.Fatalf("keel check with a damaged ConsumeQueue entry: exit %d\n%s", code, tail(out, 2000))
	}
	flipByte(t, cq, 20*3+2) // undo

	// A body byte of a record in the middle of the CommitLog.
	seg := filepath.Join(dir, "commitlog", fmt.Sprintf("%020d", 0))
	flipByte(t, seg, 50_000)
	code, out = p.check()
	if code != 1 || !strings.Contains(out, seg) {
		t.Fatalf("keel check with a damaged CommitLog record: exit %d\n%s", code, tail(out, 2000))
	}
	serve := exec.Command(bin, "serve", "-c", conf, "--data-dir", dir, "--namesrv-listen", "127.0.0.1:0",
		"--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", "")
	sout, err := serve.CombinedOutput()
	if err == nil || !strings.Contains(string(sout), "corrupt") || !strings.Contains(string(sout), "00000000000000000000") {
		t.Fatalf("keel serve on a corrupt CommitLog: %v\n%s", err, tail(string(sout), 2000))
	}
	t.Logf("FAULT corruption at rest: keel check exit %d; keel serve refused: %s", code,
		tail(strings.TrimSpace(string(sout)), 300))
}

// fillOSStore writes n messages to a store on the real filesystem and
// closes it.
func fillOSStore(t *testing.T, cfg store.Config, n int) {
	t.Helper()
	st, err := store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	host := netip.MustParseAddrPort("127.0.0.1:10911")
	for i := range n {
		id := fmt.Sprintf("c-%d", i)
		m := &message.Message{Topic: "T", QueueID: int32(i % 2), Body: makeBody(id), BornHost: host, StoreHost: host,
			Properties: message.EncodeProperties(map[string]string{message.PropUniqKey: id})}
		if res := st.PutMessage(context.Background(), m); res.Status != store.PutOK {
			t.Fatalf("put: %v %v", res.Status, res.Err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
