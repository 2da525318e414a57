package store

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// replicaFixture is a store (/data) with 30 messages in several segments
// and its replica (/replica, the same log copied through
// ReadReplication/AppendReplicated), both closed, on one MemFS.
type replicaFixture struct {
	*corruptFixture
	rcfg Config
}

func newReplicaFixture(t *testing.T, extra int, fill string) *replicaFixture {
	fx := &replicaFixture{corruptFixture: &corruptFixture{fs: vfs.NewMem()}}
	fx.cfg = testConfig(fx.fs)
	fx.cfg.FlushDiskType = SyncFlush
	fx.rcfg = fx.cfg
	fx.rcfg.Dir, fx.rcfg.Replica = "/replica", true
	s := mustOpen(t, fx.cfg)
	r := mustOpen(t, fx.rcfg)
	for i := range 30 + extra {
		if i == 30 {
			copyLog(t, s, r, 10<<10)
		}
		m := newMsg("T", 0, fmt.Sprintf("%02d-%s", i, strings.Repeat(fill, 5000)), map[string]string{"KEYS": fmt.Sprint("k", i)})
		put(t, s, m)
		fx.msgs = append(fx.msgs, ackedMsg{m.Topic, m.QueueID, m.QueueOffset, m.PhysOffset, m.Body})
		fx.sizes = append(fx.sizes, m.StoredSize())
	}
	if extra == 0 {
		copyLog(t, s, r, 10<<10)
	}
	waitVisible(t, s, "T", 0, int64(30+extra))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	return fx
}

// TestCompareReplicas: identical logs compare identical (the longer one
// named); a byte flipped in one shows as the first difference, in the
// entry that holds it; different segment sizes are refused.
func TestCompareReplicas(t *testing.T) {
	fx := newReplicaFixture(t, 3, "b")
	c, err := Compare(fx.cfg, fx.rcfg)
	if err != nil || !c.Identical() || c.Longer() != "A" || c.To != c.B.EndOffset || c.B.EndOffset != fx.msgs[30].phys ||
		c.A.EndOffset <= c.B.EndOffset || c.From != 0 {
		t.Fatalf("compare %+v: %v", c, err)
	}
	if c, err := Compare(fx.rcfg, fx.cfg); err != nil || !c.Identical() || c.Longer() != "B" {
		t.Fatalf("compare the other way %+v: %v", c, err)
	}
	i := 17
	at := fx.msgs[i].phys + 300
	fx.patch(t, at, 1, func(b []byte) { b[0] ^= 0x40 })
	c, err = Compare(fx.cfg, fx.rcfg)
	if err != nil || c.Identical() || c.FirstDiff != at || c.EntryA != fx.msgs[i].phys || c.EntryB != fx.msgs[i].phys {
		t.Fatalf("compare after a flipped byte at %d (entry %d): %+v: %v", at, fx.msgs[i].phys, c, err)
	}
	other := fx.rcfg
	other.CommitLogSegmentBytes *= 2
	if _, err := Compare(fx.cfg, other); err == nil {
		t.Fatal("segment sizes differ: no error")
	}
}

// TestRepairFromReplica: a record corrupted in the middle of the log is
// replaced by the replica's bytes: the check is clean afterwards, the two
// logs are identical, the damaged bytes are in quarantine, the isolated
// registry forgets the record, and the message reads as it was sent.
func TestRepairFromReplica(t *testing.T) {
	fx := newReplicaFixture(t, 0, "b")
	i := 12
	rec := fx.msgs[i].phys
	// The damage happens at rest while the store runs; a read finds it and
	// isolates the record.
	s := openRepairable(t, fx.cfg)
	var damaged []byte
	fx.patch(t, rec+100, 16, func(b []byte) {
		for j := range b {
			b[j] ^= 0xff
		}
		damaged = append(damaged, b...)
	})
	if _, err := s.GetMessage("T", 0, int64(i), 1, 1<<20, nil); err != nil {
		t.Fatal(err)
	}
	if len(s.Isolated()) != 1 {
		t.Fatalf("isolated %v", s.Isolated())
	}
	s.Close()
	if rep, err := Check(fx.cfg); err != nil || rep.OK() {
		t.Fatalf("check before the repair: %v %+v", err, rep.Problems)
	}

	plan, err := PlanRepairFromReplica(fx.cfg, fx.rcfg)
	if err != nil || len(plan.Ranges) != 1 || len(plan.Unrepairable) != 0 {
		t.Fatalf("plan %+v: %v", plan, err)
	}
	r := plan.Ranges[0]
	if r.Offset != rec || r.End != rec+int64(fx.sizes[i])+4 || r.Entries != 1 {
		t.Fatalf("range %+v, want [%d, %d)", r, rec, rec+int64(fx.sizes[i])+4)
	}
	if c, _ := Compare(fx.cfg, fx.rcfg); c.Identical() {
		t.Fatal("planning changed the store")
	}
	done, err := RepairFromReplica(fx.cfg, plan)
	if err != nil {
		t.Fatal(err)
	}
	fx.fs.Crash() // what the repair wrote is durable
	if rep, err := Check(fx.cfg); err != nil || !rep.OK() || len(rep.Holes) != 0 {
		t.Fatalf("check after the repair: %v %+v", err, rep.Problems)
	}
	if c, err := Compare(fx.cfg, fx.rcfg); err != nil || !c.Identical() || c.Longer() != "" {
		t.Fatalf("compare after the repair %+v: %v", c, err)
	}
	q := readAll(t, fx.fs, done.Ranges[0].Quarantine)
	if !bytes.Equal(q[100:116], damaged) || len(q) != int(r.End-r.Offset) {
		t.Fatalf("quarantine %s: %x", done.Ranges[0].Quarantine, q)
	}
	if done.DroppedIsolated != 1 {
		t.Fatalf("dropped %d isolated records", done.DroppedIsolated)
	}
	s = openRepairable(t, fx.cfg)
	defer s.Close()
	if len(s.Isolated()) != 0 {
		t.Fatalf("still isolated: %v", s.Isolated())
	}
	got, err := s.GetMessage("T", 0, int64(i), 1, 1<<20, nil)
	if err != nil || len(got.Records) != 1 || !bytes.Equal(message.View(got.Records[0]).Body(), fx.msgs[i].body) {
		t.Fatalf("message %d after the repair: %v %v", i, got, err)
	}
}

// TestRepairFromUnrelatedReplica: a "replica" holding another log at the
// damaged place is refused: its bytes do not fit between the intact
// neighbours.
func TestRepairFromUnrelatedReplica(t *testing.T) {
	fx := newReplicaFixture(t, 0, "b")
	other := newReplicaFixture(t, 0, "c") // same sizes and offsets, other bodies
	i := 5
	fx.patch(t, fx.msgs[i].phys+100, 1, func(b []byte) { b[0] ^= 1 })
	// Put the other replica in this filesystem.
	for _, name := range mustList(t, other.fs, "/replica/commitlog") {
		b := readAll(t, other.fs, "/replica/commitlog/"+name)
		if err := vfs.WriteFileDurable(fx.fs, "/replica/commitlog/"+name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	plan, err := PlanRepairFromReplica(fx.cfg, fx.rcfg)
	if err != nil || len(plan.Ranges) != 0 || len(plan.Unrepairable) != 1 {
		t.Fatalf("plan %+v: %v", plan, err)
	}
}

func mustList(t *testing.T, fs vfs.FS, dir string) []string {
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// openRepairable opens a store.
func openRepairable(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}
