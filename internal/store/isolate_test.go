package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// logCounter is a slog handler counting records by level and message prefix.
type logCounter struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Level.String()+" "+r.Message)
	return nil
}
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

func (h *logCounter) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// segmentBytes returns the bytes of the CommitLog segment holding off.
func (fx *corruptFixture) segmentBytes(t *testing.T, off int64) []byte {
	t.Helper()
	seg := off - off%fx.cfg.CommitLogSegmentBytes
	f, err := fx.fs.OpenFile("/data/commitlog/"+commitlog.SegmentName(seg), os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, size)
	f.ReadAt(b, 0)
	return b
}

// readAll reads queue T/0 from offset 0 as a consumer does (following
// NextOffset) and returns the queue offsets served.
func readQueueAll(t *testing.T, s *Store, acked []ackedMsg) []int64 {
	t.Helper()
	var served []int64
	for off := int64(0); off < s.MaxOffset("T", 0); {
		r, err := s.GetMessage("T", 0, off, 4, 1<<20, nil)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		for _, rec := range r.Records {
			v := message.View(rec)
			if !bytes.Equal(v.Body(), acked[v.QueueOffset()].body) {
				t.Fatalf("served a bad record at offset %d", v.QueueOffset())
			}
			served = append(served, v.QueueOffset())
		}
		if r.NextOffset <= off {
			t.Fatalf("stuck at %d: %v", off, r.Status)
		}
		off = r.NextOffset
		r.Release()
	}
	return served
}

// A record corrupt at rest is isolated: never served, registered durably,
// counted and logged once; consumers get the records after it.
func TestCorruptRecordIsIsolatedAndSkipped(t *testing.T) {
	withVerifyTail(t, fixtureTail) // the damage is where Open does not verify
	fx := newCorruptFixture(t, true)
	victim := fx.msgs[5]
	fx.patch(t, victim.phys+100, 1, func(b []byte) { b[0] ^= 0x08 })
	before := fx.segmentBytes(t, victim.phys)
	logs := &logCounter{}
	fx.cfg.Logger = slog.New(logs)
	s := mustOpen(t, fx.cfg)

	// A batch that meets it goes on after it.
	r, err := s.GetMessage("T", 0, 3, 8, 1<<20, nil)
	if err != nil || r.Status != Found {
		t.Fatalf("batch over the corrupt record: %v %v", r, err)
	}
	var got []int64
	for _, rec := range r.Records {
		got = append(got, message.View(rec).QueueOffset())
	}
	if fmt.Sprint(got) != "[3 4 6 7 8 9 10 11]" || r.NextOffset != 12 {
		t.Fatalf("served %v next %d, want [3 4 6 7 8 9 10 11] next 12", got, r.NextOffset)
	}
	r.Release()
	// A consumer standing at it moves on.
	r, err = s.GetMessage("T", 0, 5, 1, 1<<20, nil)
	if err != nil || r.Status != Found || len(r.Records) != 1 || message.View(r.Records[0]).QueueOffset() != 6 || r.NextOffset != 7 {
		t.Fatalf("read at the corrupt record: %+v %v", r, err)
	}
	r.Release()
	served := readQueueAll(t, s, fx.msgs)
	if len(served) != len(fx.msgs)-1 {
		t.Fatalf("served %d of %d intact records: %v", len(served), len(fx.msgs)-1, served)
	}

	want := IsolatedRecord{Topic: "T", QueueID: 0, QueueOffset: 5, PhysOffset: victim.phys, Size: int32(fx.sizes[5]), FoundBy: FoundByRead}
	checkIsolated(t, s.Isolated(), want)
	if n := logs.count("ERROR store: isolated a corrupt record"); n != 1 {
		t.Fatalf("%d ERROR lines for the isolated record, want 1 (read three times)", n)
	}
	if st := s.IntegrityStats(); st.Isolated != 1 || st.Listed != 1 || st.ReadFaults != 0 {
		t.Fatalf("stats %+v", st)
	}
	if s.Err() != nil {
		t.Fatalf("isolating a record made the store read-only: %v", s.Err())
	}
	// The registry is on disk.
	b, err := readSmallFile(fx.fs, "/data/"+isolatedName, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var f isolatedFile
	if err := json.Unmarshal(b, &f); err != nil || len(f.Records) != 1 {
		t.Fatalf("registry file: %v %s", err, b)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fx.segmentBytes(t, victim.phys), before) {
		t.Fatal("the segment holding the corrupt record was changed")
	}

	// After a restart the registry remembers it: listed, not logged again.
	logs2 := &logCounter{}
	fx.cfg.Logger = slog.New(logs2)
	s = mustOpen(t, fx.cfg)
	defer s.Close()
	checkIsolated(t, s.Isolated(), want)
	if served := readQueueAll(t, s, fx.msgs); len(served) != len(fx.msgs)-1 {
		t.Fatalf("after restart served %d", len(served))
	}
	if n := logs2.count("ERROR store: isolated"); n != 0 || s.IntegrityStats().Isolated != 0 {
		t.Fatalf("a record isolated before the restart was logged (%d) or counted again", n)
	}
}

func checkIsolated(t *testing.T, got []IsolatedRecord, want IsolatedRecord) {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("isolated %+v, want one record", got)
	}
	g := got[0]
	if g.Topic != want.Topic || g.QueueID != want.QueueID || g.QueueOffset != want.QueueOffset ||
		g.PhysOffset != want.PhysOffset || g.Size != want.Size || g.FoundBy != want.FoundBy || g.Reason == "" || g.FoundAt.IsZero() {
		t.Fatalf("isolated %+v, want %+v", g, want)
	}
}

// A read that returns bad bytes once (a FUSE filesystem without page-cache
// control) is not corruption: the re-read verifies, the record is served,
// nothing is isolated and the log says the fault was the read's.
func TestReadFaultIsServedNotIsolated(t *testing.T) {
	fx := newCorruptFixture(t, true)
	efs := vfs.NewErrorFS(fx.fs)
	fx.cfg.FS = efs
	logs := &logCounter{}
	fx.cfg.Logger = slog.New(logs)
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	efs.Inject(vfs.Rule{Ops: vfs.OpRead, Path: "/data/commitlog/", Garble: true, Times: 1})
	r, err := s.GetMessage("T", 0, 0, 4, 1<<20, nil)
	if err != nil || len(r.Records) != 4 {
		t.Fatalf("read: %v %v", r, err)
	}
	for i, rec := range r.Records {
		if !bytes.Equal(message.View(rec).Body(), fx.msgs[i].body) {
			t.Fatalf("record %d served wrong", i)
		}
	}
	r.Release()
	if efs.Injected(vfs.OpRead) != 1 {
		t.Fatalf("%d garbled reads, want 1", efs.Injected(vfs.OpRead))
	}
	st := s.IntegrityStats()
	// One fault: the rest of the garbled run is read again, not re-read
	// record by record.
	if st.ReadFaults != 1 || st.Listed != 0 || len(s.Isolated()) != 0 || s.Stats().CorruptReads != 0 {
		t.Fatalf("a read fault was taken for corruption: %+v, corrupt reads %d", st, s.Stats().CorruptReads)
	}
	if logs.count("WARN store: a read returned bytes failing verification, but the record on disk verifies") == 0 {
		t.Fatalf("no log line saying the fault was the read's: %v", logs.msgs)
	}
}

// The dispatcher meeting a read fault re-reads instead of making the store
// read-only; damage that a re-read confirms still does.
func TestDispatchReadFault(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	cfg := testConfig(efs) // with the read window: the dispatcher reads the file all the same
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	defer s.Close()
	efs.Inject(vfs.Rule{Ops: vfs.OpRead, Path: "/data/commitlog/", Garble: true, Times: 1})
	m := newMsg("T", 0, "after a read fault", nil)
	put(t, s, m)
	waitVisible(t, s, "T", 0, 1)
	if efs.Injected(vfs.OpRead) != 1 {
		t.Fatalf("the dispatcher's read was not garbled (%d)", efs.Injected(vfs.OpRead))
	}
	if err := s.Err(); err != nil {
		t.Fatalf("a read fault made the store read-only: %v", err)
	}
	if s.IntegrityStats().ReadFaults != 1 {
		t.Fatalf("read faults %d", s.IntegrityStats().ReadFaults)
	}
	checkAcked(t, s, []ackedMsg{{"T", 0, 0, m.PhysOffset, m.Body}}, "after the read fault")
	put(t, s, newMsg("T", 0, "still writable", nil))
}

// A lookup by offset (view by message id, query by key) re-reads after a
// read fault too.
func TestLookupReadFaultIsServed(t *testing.T) {
	fx := newCorruptFixture(t, true)
	efs := vfs.NewErrorFS(fx.fs)
	fx.cfg.FS = efs
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	efs.Inject(vfs.Rule{Ops: vfs.OpRead, Path: "/data/commitlog/", Garble: true, Times: 1})
	rec, err := s.LookMessageByOffset(fx.msgs[2].phys)
	if err != nil || !bytes.Equal(message.View(rec).Body(), fx.msgs[2].body) {
		t.Fatalf("lookup after a read fault: %v", err)
	}
	if efs.Injected(vfs.OpRead) != 1 || s.IntegrityStats().ReadFaults != 1 || s.Stats().CorruptReads != 0 {
		t.Fatalf("garbled %d, read faults %d, corrupt reads %d", efs.Injected(vfs.OpRead), s.IntegrityStats().ReadFaults, s.Stats().CorruptReads)
	}
}

// A registry that cannot be written (disk full) does not block the queue:
// the record is skipped and listed anyway, and the registry is written once
// the disk takes it again.
func TestIsolationWithoutRegistryWrite(t *testing.T) {
	withVerifyTail(t, fixtureTail) // the damage is where Open does not verify
	fx := newCorruptFixture(t, true)
	victim := fx.msgs[4]
	fx.patch(t, victim.phys+100, 1, func(b []byte) { b[0] ^= 0x02 })
	efs := vfs.NewErrorFS(fx.fs)
	fx.cfg.FS = efs
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	rule := efs.Inject(vfs.Rule{Ops: vfs.OpOpen | vfs.OpWrite, Path: isolatedName, Err: syscall.ENOSPC})
	if served := readQueueAll(t, s, fx.msgs); len(served) != len(fx.msgs)-1 {
		t.Fatalf("served %d of %d intact records with the registry unwritable", len(served), len(fx.msgs)-1)
	}
	if len(s.Isolated()) != 1 {
		t.Fatalf("isolated %v", s.Isolated())
	}
	if _, err := fx.fs.Stat("/data/" + isolatedName); err == nil {
		t.Fatal("the registry was written despite the fault")
	}
	efs.RemoveRule(rule)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if recs, err := ReadIsolated(fx.cfg); err == nil && len(recs) == 1 && recs[0].PhysOffset == victim.phys {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the registry was not written after the disk recovered")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An unreadable registry does not stop the store: it is kept aside for
// inspection and a new one is started.
func TestUnreadableRegistryIsKeptAside(t *testing.T) {
	fx := newCorruptFixture(t, true)
	f, err := fx.fs.OpenFile("/data/"+isolatedName, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte(`{"version":1,"records":[{"topic":`), 0)
	f.Close()
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	if len(s.Isolated()) != 0 {
		t.Fatalf("isolated %v from a torn registry", s.Isolated())
	}
	if _, err := fx.fs.Stat("/data/" + isolatedName + ".unreadable"); err != nil {
		t.Fatalf("the unreadable registry was not kept: %v", err)
	}
}

// A full registry makes room by dropping records of segments retention
// removed, and only those.
func TestRegistryMakesRoomFromRemovedSegments(t *testing.T) {
	var iso isolation
	for i := range maxIsolatedRecords {
		iso.recs = append(iso.recs, IsolatedRecord{PhysOffset: int64(i) * 100})
	}
	if !iso.makeRoom(250) || len(iso.recs) != maxIsolatedRecords-3 || iso.recs[0].PhysOffset != 300 || !iso.dirty {
		t.Fatalf("after making room below 250: %d records from %d", len(iso.recs), iso.recs[0].PhysOffset)
	}
	for len(iso.recs) < maxIsolatedRecords {
		iso.recs = append(iso.recs, IsolatedRecord{PhysOffset: 1 << 40})
	}
	if iso.makeRoom(250) || len(iso.recs) != maxIsolatedRecords {
		t.Fatal("made room by dropping records still in the log")
	}
}

// Damage the dispatcher still sees on the re-read makes the store
// read-only, as before: past a record just written that does not verify,
// nothing can be dispatched safely.
func TestDispatchDamageConfirmedGoesReadOnly(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	cfg := testConfig(efs) // with the read window: the dispatcher reads the file all the same
	cfg.FlushDiskType = SyncFlush
	logs := &logCounter{}
	cfg.Logger = slog.New(logs)
	s := mustOpen(t, cfg)
	defer s.Close()
	efs.Inject(vfs.Rule{Ops: vfs.OpRead, Path: "/data/commitlog/", Garble: true, Times: 2})
	put(t, s, newMsg("T", 0, "garbled twice", nil))
	deadline := time.Now().Add(10 * time.Second)
	for s.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the store did not go read-only")
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(s.Err(), ErrReadOnly) || s.MaxOffset("T", 0) != 0 || s.IntegrityStats().ReadFaults != 0 {
		t.Fatalf("err %v, max offset %d, read faults %d", s.Err(), s.MaxOffset("T", 0), s.IntegrityStats().ReadFaults)
	}
	if logs.count("ERROR store: a record to dispatch fails verification when read again") != 1 {
		t.Fatalf("no log line for the confirmed damage: %v", logs.msgs)
	}
}
