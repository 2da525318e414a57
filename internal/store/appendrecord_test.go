package store

import (
	"context"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// TestAppendRecordReturnsBeforeConfirmed: AppendRecord returns once the
// record is written, with the CommitLog range it occupies, and waiting for
// Confirmed up to that end is what makes it durable and visible.
func TestAppendRecordReturnsBeforeConfirmed(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	rec, err := record.AppendEnvelope(nil, record.KafkaBatch, 3, []record.Dest{{Topic: "K", QueueID: 1}}, []byte("batch"))
	if err != nil {
		t.Fatal(err)
	}
	r, phys, end := s.AppendRecord(context.Background(), rec)
	if r.Status != PutOK || phys < 0 || end <= phys+int64(len(rec)-1) {
		t.Fatalf("AppendRecord = %v %v, phys %d end %d (record %d bytes)", r.Status, r.Err, phys, end, len(rec))
	}
	if w := s.Offset(Written); w < end {
		t.Fatalf("written %d below the record's end %d", w, end)
	}
	if err := s.WaitFor(context.Background(), Confirmed, end, 5*time.Second); err != nil {
		t.Fatalf("wait confirmed: %v", err)
	}
	if err := s.WaitFor(context.Background(), Visible, end, 5*time.Second); err != nil {
		t.Fatalf("wait visible: %v", err)
	}
	if got := getOne(t, s, "K", 1, 0); string(record.Envelope(got).Body()) != "batch" {
		t.Fatalf("read back %q", record.Envelope(got).Body())
	}
	if r, phys, end := s.AppendRecord(context.Background(), []byte("garbage")); r.Status != PutMessageIllegal || phys != -1 || end != -1 {
		t.Fatalf("garbage: %v phys %d end %d", r.Status, phys, end)
	}
}
