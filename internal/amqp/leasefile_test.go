package amqp

import (
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// TestLeaseFileSlots: the lease file is written whole once and then in
// place, a slot at a time; after a power loss at any point, also in the
// middle of a write torn at any byte, it reads as the last lease whose
// write completed or as the one being written, never as anything else
// and never unreadable. A file of an earlier release (decimal text) reads
// as its value; a file whose slots are both damaged is an error.
func TestLeaseFileSlots(t *testing.T) {
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	const path = "/d/lease-t"
	var lf leaseFile
	defer lf.close()
	prev := int64(0)
	for i := range 12 {
		lease := int64(256 * (i + 1))
		if i == 7 {
			lease = 700 // lowered (a clean shutdown's trim)
		}
		if i > 0 {
			// A write of the next slot that the power cuts, torn anywhere.
			seq := lf.seq + 1
			slot := appendLeaseSlot(nil, seq, lease)
			if _, err := lf.f.WriteAt(slot, int64(seq%2)*leaseSlotBytes); err != nil {
				t.Fatal(err)
			}
			for seed := range 40 {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(seed)))
				for _, after := range []*vfs.MemFS{mem.CrashCloneWith(rng), mem.CrashCloneWriteBack(rng)} {
					got, err := readLease(after, path)
					if err != nil || (got != prev && got != lease) {
						t.Fatalf("write %d torn (seed %d): lease %d %v, want %d or %d", i, seed, got, err, prev, lease)
					}
				}
			}
		}
		if err := lf.write(mem, path, lease); err != nil {
			t.Fatal(err)
		}
		if got, err := readLease(mem.CrashClone(), path); err != nil || got != lease {
			t.Fatalf("after write %d and a power loss: lease %d %v, want %d", i, got, err, lease)
		}
		prev = lease
	}
	if err := vfs.WriteFileDurable(mem, "/d/lease-old", []byte("1234"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readLease(mem, "/d/lease-old"); err != nil || got != 1234 {
		t.Fatalf("a lease in decimal text: %d %v", got, err)
	}
	if got, err := readLease(mem, "/d/lease-none"); err != nil || got != 0 {
		t.Fatalf("no lease file: %d %v", got, err)
	}
	if err := vfs.WriteFileDurable(mem, "/d/lease-bad", make([]byte, leaseFileBytes), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readLease(mem, "/d/lease-bad"); err == nil || !strings.Contains(err.Error(), "neither lease slot") {
		t.Fatalf("a file of two damaged slots read without the error: %v", err)
	}
}

// renameCountFS counts the renames onto files whose name contains sub.
type renameCountFS struct {
	vfs.FS
	sub string
	n   *atomic.Int64
}

func (f renameCountFS) Rename(oldname, newname string) error {
	if strings.Contains(newname, f.sub) {
		f.n.Add(1)
	}
	return f.FS.Rename(oldname, newname)
}

// TestLeaseRaisedInPlace: a durable queue's lease file is written anew
// once; the raises after it are writes in place (no new file, no rename);
// after a crash the queue reads the last lease raised and flags every
// message handed out before the crash as redelivered.
func TestLeaseRaisedInPlace(t *testing.T) {
	var renames atomic.Int64
	b := &broker{t: t, dir: t.TempDir(), fs: renameCountFS{FS: vfs.OS{}, sub: "lease-", n: &renames}}
	b.start()
	t.Cleanup(b.stop)
	pub := b.channel()
	if _, err := pub.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	const total, unacked = 5 * leaseStep, 40
	bodies := make([]string, total)
	for i := range bodies {
		bodies[i] = "m"
	}
	publishConfirmed(t, pub, "q", bodies...)
	sub := b.channel()
	if err := sub.Qos(2*leaseStep, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Consume("q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range total {
		d := recv(t, ds)
		if i < total-unacked {
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		}
	}
	q := b.srv.vhosts["/"].queue("q")
	waitUntil(t, "the lease past every delivery", func() bool {
		l, err := readLease(vfs.OS{}, q.leasePath())
		return err == nil && l >= total
	})
	if n := renames.Load(); n != 1 {
		t.Fatalf("the lease file was written anew %d times for %d deliveries, want once", n, total)
	}
	if _, err := os.Stat(q.leasePath() + ".tmp"); err == nil {
		t.Fatal("a temporary lease file is left")
	}
	waitUntil(t, "the acks in acks.json", func() bool {
		d, _ := q.snapshot()
		return d.Floor >= total-unacked
	})
	if err := b.srv.vhosts["/"].saveAcks(); err != nil {
		t.Fatal(err)
	}
	b.crash()
	b.start()
	ds, err = b.channel().Consume("q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range unacked {
		if d := recv(t, ds); !d.Redelivered {
			t.Fatalf("message %d of the %d unacknowledged before the crash is not flagged redelivered", i, unacked)
		}
	}
}
