package core

import (
	"context"
	"errors"
	"testing"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// fakeTable records what the core hands it.
type fakeTable struct {
	point    int64
	noPoint  bool
	applied  []int64 // phys of each record applied
	replayed int64
	flushes  int
}

func (f *fakeTable) Owns(k record.Kind) bool      { return k.IsAMQP() }
func (f *fakeTable) SnapshotPoint() (int64, bool) { return f.point, !f.noPoint }
func (f *fakeTable) PullBack(end int64)           { f.point = end }
func (f *fakeTable) Apply(phys, end int64, r *record.SystemRecord) error {
	if phys >= f.point {
		f.applied = append(f.applied, phys)
	}
	return nil
}
func (f *fakeTable) Replayed(end int64) error { f.replayed = end; return nil }
func (f *fakeTable) Flush() error             { f.flushes++; return nil }

// TestTablesGetTheirKinds: records of a kind a table owns reach it at
// start from its snapshot point (before the core serves), its point
// lowers the core's replay start, FlushOffsets flushes it, and without a
// table owning the kind the start fails naming it (a kind no one keeps
// is never skipped).
func TestTablesGetTheirKinds(t *testing.T) {
	mem := vfs.NewMem()
	st, err := store.Open(pairStoreConfig(mem))
	if err != nil {
		t.Fatal(err)
	}
	tab := &fakeTable{}
	cfg := coreConfig(mem, true)
	cfg.Tables = []SystemTable{tab}
	b, err := New(cfg, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.EnsureTopic("orders", 1, PermRW); err != nil { // core records after the table's
		t.Fatal(err)
	}
	rec, err := record.AppendSystemRecord(nil, &record.SystemRecord{Kind: record.KindAMQPQueues, Vhost: "/", Configs: []record.ConfigEntry{{Name: "q", Config: []byte(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	res, phys, end := st.AppendRecord(context.Background(), rec)
	if !res.OK() {
		t.Fatal(res.Err)
	}
	if len(tab.applied) != 0 {
		t.Fatalf("a master's own record was applied while it serves: %v", tab.applied)
	}
	if _, err := b.EnsureTopic("later", 1, PermRW); err != nil {
		t.Fatal(err)
	}
	if err := b.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	if tab.flushes == 0 {
		t.Error("FlushOffsets did not flush the table")
	}
	st.Close()

	// The core's files have points after the record; the table's (0)
	// makes the replay start before it.
	if st, err = store.Open(pairStoreConfig(mem)); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tab2 := &fakeTable{}
	cfg.Tables = []SystemTable{tab2}
	if _, err := New(cfg, st, nil); err != nil {
		t.Fatal(err)
	}
	if len(tab2.applied) != 1 || tab2.applied[0] != phys {
		t.Fatalf("replayed %v, want the record at %d", tab2.applied, phys)
	}
	if tab2.replayed < end {
		t.Errorf("Replayed(%d), want at least %d", tab2.replayed, end)
	}
	// From its point on, the record is the table's to skip.
	tab3 := &fakeTable{point: end}
	cfg.Tables = []SystemTable{tab3}
	if _, err := New(cfg, st, nil); err != nil {
		t.Fatal(err)
	}
	if len(tab3.applied) != 0 {
		t.Errorf("a record before the point was applied: %v", tab3.applied)
	}
	// No point: the replay is the core's (from its own points, after
	// the record).
	tab5 := &fakeTable{noPoint: true}
	cfg.Tables = []SystemTable{tab5}
	if _, err := New(cfg, st, nil); err != nil {
		t.Fatal(err)
	}
	if len(tab5.applied) != 0 {
		t.Errorf("a table without a point made the replay start before the core's points: %v", tab5.applied)
	}
	// A point beyond the log is pulled back.
	tab4 := &fakeTable{point: 1 << 40}
	cfg.Tables = []SystemTable{tab4}
	if _, err := New(cfg, st, nil); err != nil {
		t.Fatal(err)
	}
	if tab4.point > st.Offset(store.Written) {
		t.Errorf("point %d not pulled back to the log's end %d", tab4.point, st.Offset(store.Written))
	}
	// No table for the kind: the record (at start, or as a replica
	// dispatches it) is an error, never a skip.
	cfg.Tables = nil
	nb, err := New(cfg, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	nb.sys.serving.Store(false) // as during the start's replay
	if err := nb.onSystem(phys, end, record.Envelope(rec).Body()); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("an AMQP record with no table for it: %v, want an error", err)
	}
}
