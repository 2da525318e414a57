package store

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// TestStoreTimeAt: the store time of the record at an offset, across a
// segment end (a blank marker gives the next segment's first record), and
// an error past the written offset.
func TestStoreTimeAt(t *testing.T) {
	var clock atomic.Int64
	clock.Store(1_000_000)
	cfg := testConfig(vfs.NewMem())
	cfg.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
	s := mustOpen(t, cfg)
	defer s.Close()
	body := strings.Repeat("x", 7000)
	var starts []int64
	for i := range 20 { // ~7 KiB each: several 64 KiB segments
		starts = append(starts, s.Offset(Written))
		clock.Store(1_000_000 + int64(i)*1000)
		put(t, s, newMsg("T", 0, body, nil))
	}
	for i, off := range starts {
		got, err := s.StoreTimeAt(off)
		if err != nil || got != 1_000_000+int64(i)*1000 {
			t.Fatalf("record %d at %d: store time %d, %v", i, off, got, err)
		}
	}
	// The written offset before a put that did not fit in its segment is
	// the blank marker's: that put's record, in the next segment, answers
	// (the first loop read it there).
	blanks := 0
	for i := 1; i < len(starts); i++ {
		if starts[i]-starts[i-1] != starts[1]-starts[0] {
			blanks++
		}
	}
	if blanks == 0 {
		t.Fatal("no segment ended")
	}
	if _, err := s.StoreTimeAt(s.Offset(Written)); err == nil {
		t.Fatal("no error at the written offset")
	}
}
