package metrics

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
)

// Isolating a corrupt record shows in the store integrity metrics.
func TestIsolatedRecordsAreCounted(t *testing.T) {
	e := startEnv(t)
	for _, body := range []string{"a", "b", "c"} {
		if r := e.send("T", body); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.st.MaxOffset("T", 0) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("messages not dispatched")
		}
		time.Sleep(time.Millisecond)
	}
	e.wantMetric("keel_store_isolated_records_total", 0)
	e.wantMetric("keel_store_scrub_rate_bytes", 0)
	r, err := e.st.GetMessage("T", 0, 1, 1, 1<<20, nil)
	if err != nil || len(r.Records) != 1 {
		t.Fatal(err)
	}
	v := message.View(r.Records[0])
	phys, size := v.PhysOffset(), int64(len(v))
	r.Release()
	f, err := os.OpenFile(filepath.Join(e.dir, "commitlog", "00000000000000000000"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	f.ReadAt(b, phys+size-3)
	b[0] ^= 0x04
	f.WriteAt(b, phys+size-3)
	f.Close()
	r, err = e.st.GetMessage("T", 0, 1, 1, 1<<20, nil)
	if err != nil || len(r.Records) != 1 || message.View(r.Records[0]).QueueOffset() != 2 {
		t.Fatalf("read over the corrupt record: %v", err)
	}
	r.Release()
	e.wantMetric("keel_store_isolated_records_total", 1)
	e.wantMetric("keel_store_isolated_records", 1)
	e.wantMetric("keel_store_read_faults_total", 0)
	e.wantMetric("keel_store_corrupt_reads_total", 1)
}
