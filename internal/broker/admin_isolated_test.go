package broker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// atRest makes a store read every record from its file: without it the
// newest records are read from the CommitLog's read window, which holds
// them as written, and a test's damage to the file is not met.
func atRest(c *store.Config) { c.ReadWindowBytes = -1 }

// A record corrupted at rest does not block its queue: the pull that meets
// it answers the messages after it and a nextBeginOffset past it, and
// LIST_ISOLATED_RECORDS lists it. (At rest: the store keeps no read
// window, which would serve the record as it was written.)
func TestListIsolatedRecords(t *testing.T) {
	e := &env{t: t, dir: t.TempDir(), fs: vfs.OS{}, flush: store.AsyncFlush, storeMutate: atRest}
	e.cfg = DefaultConfig()
	e.cfg.DataDir = e.dir
	e.start()
	t.Cleanup(e.shutdown)
	cl := e.dial()
	for i := 0; i < 5; i++ {
		wantCode(t, cl.sendV1("T", 0, "", []byte(fmt.Sprint("message ", i))), remoting.ResSuccess)
	}
	e.waitMax("T", 0, 5)
	resp := cl.invoke(remoting.ReqListIsolatedRecords, nil, nil)
	wantCode(t, resp, remoting.ResSuccess)
	var rep isolatedReport
	if err := json.Unmarshal(resp.Body, &rep); err != nil || len(rep.Records) != 0 || rep.Broker != "broker-a" {
		t.Fatalf("report of a sound store: %v %s", err, resp.Body)
	}

	// Flip a bit of message 2's body on disk (the segment's bytes are read
	// through the page cache this write goes to).
	r, err := e.st.GetMessage("T", 0, 2, 1, 1<<20, nil)
	if err != nil || len(r.Records) != 1 {
		t.Fatal(err)
	}
	v := message.View(r.Records[0])
	phys, size := v.PhysOffset(), len(v)
	r.Release()
	f, err := os.OpenFile(filepath.Join(e.dir, "commitlog", fmt.Sprintf("%020d", 0)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	f.ReadAt(b, phys+int64(size)-10)
	b[0] ^= 0x10
	f.WriteAt(b, phys+int64(size)-10)
	f.Close()

	ext := pullExt("g", "T", 0, 2, remoting.PullFlagSubscription, 0)
	ext["subscription"] = "*"
	resp = cl.invoke(remoting.ReqPullMessage, ext, nil)
	wantCode(t, resp, remoting.ResSuccess)
	ms := splitRecords(t, resp.Body)
	if len(ms) != 2 || ms[0].QueueOffset != 3 || ms[1].QueueOffset != 4 || resp.ExtFields["nextBeginOffset"] != "5" {
		t.Fatalf("pull over the corrupt record: %d messages, next %s", len(ms), resp.ExtFields["nextBeginOffset"])
	}

	resp = cl.invoke(remoting.ReqListIsolatedRecords, nil, nil)
	wantCode(t, resp, remoting.ResSuccess)
	if err := json.Unmarshal(resp.Body, &rep); err != nil || len(rep.Records) != 1 {
		t.Fatalf("report: %v %s", err, resp.Body)
	}
	got := rep.Records[0]
	if got.Topic != "T" || got.QueueID != 0 || got.QueueOffset != 2 || got.PhysOffset != phys || got.Size != int32(size) || got.FoundBy != "read" || got.Reason == "" {
		t.Fatalf("isolated %+v, want T/0 offset 2 at %s", got, strconv.FormatInt(phys, 10))
	}
}
