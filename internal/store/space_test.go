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

// A refusal names the rule that refused: the hard limit ratio when the
// space above it is the reserve, the free-space reserve when that is
// larger (a small disk, here at 50 % used), never "above the hard limit"
// for a disk below it.
func TestDiskFullNamesWhatRefused(t *testing.T) {
	for _, c := range []struct {
		name         string
		reserveBytes int64
		free         func(used uint64, reserve int64) (total uint64)
		want, not    []string
	}{
		{"the ratio", 0, func(used uint64, _ int64) uint64 { return used * 100 / 95 },
			[]string{"used, above the hard limit of 90%", "kept for dispatch and metadata"}, []string{"free-space reserve", "not reached"}},
		{"the reserve", 1 << 20, func(used uint64, reserve int64) uint64 { return used + uint64(reserve) - 4<<10 },
			[]string{"less than the free-space reserve of", "the hard limit of 90% is not reached"}, []string{"above the hard limit"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			cfg := testConfig(mem)
			cfg.DiskReserveBytes = c.reserveBytes
			s := mustOpen(t, cfg)
			defer s.Close()
			for i := range 20 {
				put(t, s, newMsg("T", 0, strings.Repeat("x", 1000+i), nil))
			}
			total, avail, _ := mem.DiskUsage("/data")
			used := total - avail
			mem.SetCapacity(c.free(used, cfg.minReserveBytes()))
			if _, err := s.checkDisk(); err != nil {
				t.Fatal(err)
			}
			r := s.PutMessage(context.Background(), newMsg("T", 0, "x", nil))
			if r.Status != PutDiskFull || !errors.Is(r.Err, ErrDiskFull) {
				t.Fatalf("put on a full disk: %v %v", r.Status, r.Err)
			}
			msg := r.Err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("refusal %q lacks %q", msg, w)
				}
			}
			for _, w := range c.not {
				if strings.Contains(msg, w) {
					t.Errorf("refusal %q says %q", msg, w)
				}
			}
		})
	}
}
