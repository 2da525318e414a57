package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// Admission: a write is refused when it would eat into the reserve, the
// store counts as full (Stats.DiskFull) once a small message would be
// refused, and a batch too large for what is left is refused while small
// messages still go.
func TestAdmissionKeepsTheReserve(t *testing.T) {
	mem := vfs.NewMem()
	cfg := testConfig(mem)
	cfg.DiskReserveBytes = 100 << 10
	s := mustOpen(t, cfg)
	defer s.Close()
	reserve := cfg.minReserveBytes() // above 10 % of the disks below
	setFree := func(free uint64) {
		t.Helper()
		total, avail, _ := mem.DiskUsage("/data")
		mem.SetCapacity(total - avail + free)
		if _, err := s.checkDisk(); err != nil {
			t.Fatal(err)
		}
	}

	setFree(uint64(reserve) + 20<<10)
	if s.Stats().DiskFull {
		t.Fatal("full with 20 KiB above the reserve")
	}
	put(t, s, newMsg("T", 0, "small", nil))
	big := newMsg("T", 0, strings.Repeat("b", 8<<10), nil)
	batch := []*message.Message{big, newMsg("T", 0, strings.Repeat("c", 8<<10), nil), newMsg("T", 0, strings.Repeat("d", 8<<10), nil)}
	if r := s.PutMessages(context.Background(), batch); r.Status != PutDiskFull || !errors.Is(r.Err, ErrDiskFull) {
		t.Fatalf("a 24 KiB batch with 20 KiB above the reserve: %v %v", r.Status, r.Err)
	}
	if s.Stats().DiskFull {
		t.Fatal("a refused large batch made the store full")
	}
	put(t, s, newMsg("T", 0, "still fits", nil))

	setFree(uint64(reserve) + 512)
	if !s.Stats().DiskFull {
		t.Fatal("not full with 512 bytes above the reserve")
	}
	if r := s.PutMessage(context.Background(), newMsg("T", 0, "x", nil)); r.Status != PutDiskFull || !errors.Is(r.Err, ErrDiskFull) {
		t.Fatalf("put with 512 bytes above the reserve: %v %v", r.Status, r.Err)
	}
}
