package store

import (
	"context"
	"errors"
	"testing"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// TestPutGate: with a gate that refuses, every put of messages or
// enveloped records is refused with the gate's result and writes nothing;
// a system record (metadata the broker logs whatever the gate says) is
// written.
func TestPutGate(t *testing.T) {
	s := mustOpen(t, testConfig(vfs.NewMem()))
	defer s.Close()
	refused := errors.New("too few in sync")
	s.SetPutGate(func() PutResult { return PutResult{Status: PutInSyncReplicasNotEnough, Err: refused} })
	if r := s.PutMessage(context.Background(), newMsg("G", 0, "m", nil)); r.Status != PutInSyncReplicasNotEnough || !errors.Is(r.Err, refused) {
		t.Fatalf("gated put: %v %v", r.Status, r.Err)
	}
	if w := s.Offset(Written); w != 0 {
		t.Fatalf("a refused put wrote %d bytes", w)
	}
	sys, err := record.AppendSystemRecord(nil, &record.SystemRecord{Kind: record.KindOffsets,
		Offsets: []record.OffsetEntry{{Group: "g", Topic: "G", QueueID: 0, Offset: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, end := s.AppendRecord(context.Background(), sys); !r.OK() || end <= 0 {
		t.Fatalf("system record under the gate: %v %v", r.Status, r.Err)
	}
	s.SetPutGate(nil)
	if r := s.PutMessage(context.Background(), newMsg("G", 0, "m", nil)); !r.OK() {
		t.Fatalf("put without the gate: %v %v", r.Status, r.Err)
	}
}
