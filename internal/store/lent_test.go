package store

import (
	"fmt"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

func TestReadsLentCountsUnreleasedResults(t *testing.T) {
	s := mustOpen(t, testConfig(vfs.NewMem()))
	defer s.Close()
	for i := range 4 {
		put(t, s, newMsg("T", 0, fmt.Sprint(i), nil))
	}
	waitVisible(t, s, "T", 0, 4)
	a, err := s.GetMessage("T", 0, 0, 4, 1<<20, nil)
	if err != nil || len(a.Records) != 4 {
		t.Fatalf("get: %v", err)
	}
	b, err := s.GetMessage("T", 0, 2, 4, 1<<20, nil)
	if err != nil || len(b.Records) != 2 {
		t.Fatalf("get: %v", err)
	}
	empty, err := s.GetMessage("T", 0, 4, 4, 1<<20, nil) // nothing new: holds no buffer
	if err != nil || len(empty.Records) != 0 {
		t.Fatalf("get at max: %v", err)
	}
	if n := s.Stats().ReadsLent; n != 2 {
		t.Fatalf("ReadsLent %d with two results out, want 2", n)
	}
	a.Release()
	a.Release() // idempotent
	empty.Release()
	if n := s.Stats().ReadsLent; n != 1 {
		t.Fatalf("ReadsLent %d after releasing one, want 1", n)
	}
	b.Release()
	if n := s.Stats().ReadsLent; n != 0 {
		t.Fatalf("ReadsLent %d after releasing all, want 0", n)
	}
}
