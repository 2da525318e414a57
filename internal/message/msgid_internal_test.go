package message

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"testing"
	"time"
)

// TestUniqIDMonthWindow drives the generator's clock across a month boundary
// and back: the time field counts ms from the start of the current month.
func TestUniqIDMonthWindow(t *testing.T) {
	now := time.Date(2025, time.January, 31, 23, 59, 59, 500e6, time.Local)
	g := newUniqIDGenerator(netip.MustParseAddr("1.2.3.4"), 77, func() time.Time { return now })
	msOf := func(id string) uint32 {
		b, err := hex.DecodeString(id)
		if err != nil || len(b) != 16 {
			t.Fatalf("bad id %q", id)
		}
		if binary.BigEndian.Uint16(b[4:]) != 77 {
			t.Fatalf("pid field of %q", id)
		}
		return binary.BigEndian.Uint32(b[10:])
	}
	jan := time.Date(2025, time.January, 1, 0, 0, 0, 0, time.Local)
	if got, want := msOf(g.Next()), uint32(now.Sub(jan).Milliseconds()); got != want {
		t.Fatalf("January: %d, want %d", got, want)
	}
	now = time.Date(2025, time.February, 1, 0, 0, 1, 0, time.Local)
	if got := msOf(g.Next()); got != 1000 {
		t.Fatalf("February: %d, want 1000", got)
	}
	now = time.Date(2025, time.January, 1, 0, 0, 2, 0, time.Local) // clock stepped back
	if got := msOf(g.Next()); got != 2000 {
		t.Fatalf("back in January: %d, want 2000", got)
	}
}
