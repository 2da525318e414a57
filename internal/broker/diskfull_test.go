package broker

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// A new consumer group can register and pull on a full disk: its
// auto-created configuration (and retry topic) could not be written, so it
// is kept in memory and written once space returns (a pull failed with
// "write .../config/subscriptionGroup.json.tmp: no space left on device").
func TestNewGroupPullsOnFullDisk(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	e := &env{t: t, dir: "/data", fs: efs, flush: store.AsyncFlush}
	e.cfg = DefaultConfig()
	e.cfg.DataDir = e.dir
	e.cfg.OffsetFlushInterval = 10 * time.Millisecond
	e.start()
	t.Cleanup(e.shutdown)
	t.Cleanup(func() { efs.SetFreeBytes(-1) }) // before shutdown (cleanups run last first)
	cl := e.dial()
	for i := range 3 {
		wantCode(t, cl.sendV1("T", 0, "", []byte{byte(i)}), remoting.ResSuccess)
	}
	e.waitMax("T", 0, 3)

	efs.SetFreeBytes(0)
	if r := cl.sendV1("T", 0, "", []byte("refused")); r.Code == remoting.ResSuccess {
		t.Fatal("a send was stored on a full disk")
	}
	wantCode(t, cl.heartbeat("c1", "NEWG", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	resp := cl.invoke(remoting.ReqPullMessage, pullExt("NEWG", "T", 0, 0, 0, 0), nil)
	wantCode(t, resp, remoting.ResSuccess)
	if ms := splitRecords(t, resp.Body); len(ms) != 3 {
		t.Fatalf("pulled %d messages on a full disk, want 3", len(ms))
	}
	if _, ok := e.b.Group("NEWG"); !ok {
		t.Fatal("the group is not known")
	}
	if _, ok := e.b.core.Topic(RetryTopic("NEWG")); ok {
		t.Fatal("the retry topic was created on a full disk")
	}

	efs.SetFreeBytes(-1)
	waitFor(t, "the group to be saved", func() bool {
		data, err := groupFile(efs)
		return err == nil && strings.Contains(data, `"NEWG"`)
	})
	wantCode(t, cl.heartbeat("c1", "NEWG", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	if _, ok := e.b.core.Topic(RetryTopic("NEWG")); !ok {
		t.Fatal("the next heartbeat did not create the retry topic")
	}
	e.restart()
	if _, ok := e.b.Group("NEWG"); !ok {
		t.Fatal("the group is not on disk after a restart")
	}
	data, err := groupFile(efs)
	if err != nil || !strings.Contains(data, `"NEWG"`) {
		t.Fatalf("subscriptionGroup.json: %v %s", err, data)
	}
}

// The store's retention hook reports committed offsets per topic and group,
// and groups whose consumers subscribe to a topic without offsets.
func TestConsumerOffsetsForRetention(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	e.b.core.RecordOffset("G", "T", 0, 5)
	e.b.core.RecordOffset("G", "T", 2, 7)
	e.b.core.RecordOffset("H", "T", 0, 1)
	wantCode(t, cl.heartbeat("c1", "S", "U", "*", "CLUSTERING"), remoting.ResSuccess)
	got := e.b.core.ConsumerOffsets()
	if g := got["T"]; len(g) != 2 || g["G"][0] != 5 || g["G"][2] != 7 || g["H"][0] != 1 || len(g["H"]) != 1 {
		t.Fatalf("offsets of T: %v", g)
	}
	if s, ok := got["U"]["S"]; !ok || len(s) != 0 {
		t.Fatalf("subscribed group S of U: %v", got["U"])
	}
	e.b.SetScheduler(&progressScheduler{fakeScheduler{st: e.st}})
	if p := e.b.core.ConsumerOffsets()["SCHEDULE_TOPIC_XXXX"][core.ScheduleProgressGroup]; p[2] != 9 {
		t.Fatalf("schedule progress: %v", p)
	}
}

// progressScheduler reports delivery progress like schedule.Service.
type progressScheduler struct{ fakeScheduler }

func (*progressScheduler) Progress() map[string]map[int32]int64 {
	return map[string]map[int32]int64{"SCHEDULE_TOPIC_XXXX": {2: 9}}
}

// groupFile returns the contents of the broker's subscriptionGroup.json.
func groupFile(fsys vfs.FS) (string, error) {
	f, err := fsys.OpenFile("/data/config/subscriptionGroup.json", os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	return string(data), err
}
