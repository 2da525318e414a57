package store

import (
	"context"
	"testing"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// TestPutRecordDeferred: under SYNC_FLUSH the records are appended in call
// order at once and each done comes with PutOK once Confirmed passed it;
// a refused record is answered at once and done is never called.
func TestPutRecordDeferred(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	defer s.Close()
	type ack struct {
		i               int
		r               PutResult
		phys, confirmed int64
	}
	acks := make(chan ack, 3)
	var physs []int64
	for i := range 3 {
		rec, err := record.AppendEnvelope(nil, record.AMQP, 1, []record.Dest{{Topic: "A", QueueID: 0}}, []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		res, phys, pending := s.PutRecordDeferred(context.Background(), rec, func(r PutResult, phys int64) {
			acks <- ack{i, r, phys, s.Offset(Confirmed)}
		})
		if !pending || phys < 0 || (len(physs) > 0 && phys <= physs[len(physs)-1]) {
			t.Fatalf("put %d: %+v phys %d pending %v", i, res, phys, pending)
		}
		physs = append(physs, phys)
	}
	for range 3 {
		a := <-acks
		if a.r.Status != PutOK || a.phys != physs[a.i] || a.confirmed <= physs[a.i] {
			t.Fatalf("done %d: %+v at %d with Confirmed at %d, the record at %d", a.i, a.r, a.phys, a.confirmed, physs[a.i])
		}
	}
	if res, phys, pending := s.PutRecordDeferred(context.Background(), []byte{1, 2}, func(PutResult, int64) { t.Error("done called for a refused record") }); res.Status != PutMessageIllegal || phys != -1 || pending {
		t.Fatalf("garbage: %+v %d %v", res, phys, pending)
	}
}
