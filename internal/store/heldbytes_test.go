package store

import (
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// HeldBytes counts the whole pooled buffers a result lends, and the own
// buffers of records too large for one.
func TestHeldBytesCountsWholeBuffers(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.CommitLogSegmentBytes, cfg.MaxMessageBytes = 1<<20, 300<<10
	s := mustOpen(t, cfg)
	defer s.Close()
	put(t, s, newMsg("T", 0, "small", nil))
	put(t, s, newMsg("T", 0, strings.Repeat("b", 280<<10), nil))
	waitVisible(t, s, "T", 0, 2)

	r, err := s.GetMessage("T", 0, 0, 1, 1<<20, nil)
	if err != nil || len(r.Records) != 1 {
		t.Fatalf("get: %v", err)
	}
	if got := r.HeldBytes(); got != slabBytes {
		t.Fatalf("one small record: HeldBytes %d, want one buffer (%d)", got, slabBytes)
	}
	r.Release()
	if got := r.HeldBytes(); got != 0 {
		t.Fatalf("after Release: HeldBytes %d", got)
	}

	r, err = s.GetMessage("T", 0, 1, 1, 1<<20, nil)
	if err != nil || len(r.Records) != 1 {
		t.Fatalf("get large: %v", err)
	}
	if got := r.HeldBytes(); got < len(r.Records[0]) {
		t.Fatalf("a record larger than a buffer: HeldBytes %d < record %d", got, len(r.Records[0]))
	}
	r.Release()
}
