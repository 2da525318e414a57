package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

func putSystem(t *testing.T, s *Store, r *record.SystemRecord) (phys, end int64) {
	t.Helper()
	rec, err := record.AppendSystemRecord(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	res, phys := s.PutRecord(context.Background(), rec)
	if !res.OK() {
		t.Fatalf("put system record: %v %v", res.Status, res.Err)
	}
	return phys, s.Offset(Written)
}

// TestSystemRecordsReplayThenFollow: SubscribeSystem replays the system
// records from the given offset, then hands over every new one exactly
// once; they get no ConsumeQueue entry and no read returns them.
func TestSystemRecordsReplayThenFollow(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	defer s.Close()
	first, firstEnd := putSystem(t, s, &record.SystemRecord{Kind: record.KindOffsetsDelete, Group: "a"})
	putBatch(t, s, "T", 0, "m", 1, 10)
	second, _ := putSystem(t, s, &record.SystemRecord{Kind: record.KindOffsetsDelete, Group: "b"})
	waitUntil(t, "dispatch", func() bool { return s.VisibleOffset() == s.Offset(Written) })

	var mu sync.Mutex
	var got []string
	fn := func(phys, end int64, body []byte) error {
		r, err := record.DecodeSystem(body)
		if err != nil {
			return err
		}
		mu.Lock()
		got = append(got, r.Group)
		mu.Unlock()
		return nil
	}
	if _, err := s.SubscribeSystem(firstEnd, fn); err != nil { // after the first record
		t.Fatal(err)
	}
	putSystem(t, s, &record.SystemRecord{Kind: record.KindOffsetsDelete, Group: "c"})
	waitUntil(t, "the new record", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	mu.Lock()
	if len(got) != 2 || got[0] != "b" || got[1] != "c" {
		t.Fatalf("records handed over: %v, want [b c]", got)
	}
	mu.Unlock()
	for _, phys := range []int64{first, second} {
		if _, err := s.LookMessageByOffset(phys); err == nil {
			t.Errorf("LookMessageByOffset(%d) returned a system record", phys)
		}
	}
	if n := s.MaxOffset("T", 0); n != 1 {
		t.Errorf("queue T/0 has %d entries, want the message's only", n)
	}
}

// TestUnknownSystemKindStopsDispatch: a system record of a kind this
// release does not know fails the store at dispatch, never skipped.
func TestUnknownSystemKindStopsDispatch(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	defer s.Close()
	rec, err := record.AppendEnvelope(nil, record.System, 0, nil, []byte{record.SystemVersion, 200})
	if err != nil {
		t.Fatal(err)
	}
	s.AppendRecord(context.Background(), rec)
	waitUntil(t, "the store to fail", func() bool { return s.Err() != nil })
	if err := s.Err(); !errors.Is(err, record.ErrUnknownType) {
		t.Fatalf("store error %v does not wrap ErrUnknownType", err)
	}
	s.Close()
	// Recovery dispatches it again at the next open, and stops there too.
	if s2, err := Open(cfg); err == nil {
		s2.Close()
		t.Fatal("a store holding a system record of an unknown kind opened")
	} else if !errors.Is(err, record.ErrUnknownType) {
		t.Fatalf("open: %v does not wrap ErrUnknownType", err)
	}
}

// TestCheckReportsUnknownSystemKind: keel check's Check accepts the
// system records it can read (no queue entry expected for them) and names
// one it cannot.
func TestCheckReportsUnknownSystemKind(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	putSystem(t, s, &record.SystemRecord{Kind: record.KindOffsetsDelete, Group: "g"})
	waitUntil(t, "dispatch", func() bool { return s.VisibleOffset() == s.Offset(Written) })
	s.Close()
	if rep, err := Check(cfg); err != nil || !rep.OK() {
		t.Fatalf("a known system record: %+v %v", rep.Problems, err)
	}
	s = mustOpen(t, cfg)
	rec, _ := record.AppendEnvelope(nil, record.System, 0, nil, []byte{record.SystemVersion, 200})
	s.AppendRecord(context.Background(), rec)
	s.WaitFor(context.Background(), Flushed, s.Offset(Written), time.Second)
	s.Close()
	rep, err := Check(cfg)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range rep.Problems {
		found = found || strings.Contains(p.Msg, "unknown kind 200")
	}
	if !found {
		t.Fatalf("Check did not name the unknown kind: %+v", rep.Problems)
	}
}
