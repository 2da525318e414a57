package console

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/message"
)

// The corrupt-records page's API lists a record isolated after a flipped
// bit, with each broker's scrubber status.
func TestAPICorrupt(t *testing.T) {
	c := startCluster(t, false)
	f := c.seed()
	var bs []admin.BrokerIntegrity
	c.getJSON("/api/corrupt", 200, &bs)
	if len(bs) != 1 || bs[0].Broker != "broker-a" || len(bs[0].Records) != 0 || bs[0].Err != "" {
		t.Fatalf("sound store: %+v", bs)
	}

	phys := c.corruptAndIsolate(f, 1)

	c.getJSON("/api/corrupt", 200, &bs)
	if len(bs) != 1 || len(bs[0].Records) != 1 {
		t.Fatalf("after isolation: %+v", bs)
	}
	got := bs[0].Records[0]
	if got.Topic != f.topic || got.QueueID != 0 || got.QueueOffset != 1 || got.CommitLogOffset != phys || got.FoundBy != "read" {
		t.Fatalf("isolated %+v, want %s/0 offset 1 at %d", got, f.topic, phys)
	}
}

// corruptAndIsolate flips a bit of the body of sent message i (queue 0 of
// the fixture's topic) in the CommitLog and reads over it, which isolates
// it. It returns the record's CommitLog offset.
func (c *cluster) corruptAndIsolate(f fixture, i int) int64 {
	c.t.Helper()
	_, phys, err := message.ParseOffsetMsgID(f.sent[i].OffsetMsgID)
	if err != nil {
		c.t.Fatal(err)
	}
	seg, err := os.OpenFile(filepath.Join(c.dir, "commitlog", "00000000000000000000"), os.O_RDWR, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	b := make([]byte, 1)
	seg.ReadAt(b, phys+150)
	b[0] ^= 0x01
	seg.WriteAt(b, phys+150)
	seg.Close()
	r, err := c.st.GetMessage(f.topic, 0, int64(i), 1, 1<<20, nil)
	if err != nil || len(r.Records) != 1 || message.View(r.Records[0]).QueueOffset() != int64(i)+1 {
		c.t.Fatalf("read over the corrupt record: %v", err)
	}
	r.Release()
	return phys
}
