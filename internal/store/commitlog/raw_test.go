package commitlog

import (
	"errors"
	"slices"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// TestAppendRawCheckedChecksInItsWalk: AppendRawChecked calls check for
// each record its verification passed, in order, and admit once after the
// whole range and before any byte is written; an error of either, or a
// corrupt record, refuses the range with nothing written (and a corrupt
// record is never handed to check, nor admit called).
func TestAppendRawCheckedChecksInItsWalk(t *testing.T) {
	src, _ := openLog(t, vfs.NewMem(), RecoverOptions{})
	defer src.Close()
	want := appendAll(t, src, recs300(3)...)
	raw, end, err := src.ReadRaw(0, src.WrittenOffset(), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := openLog(t, vfs.NewMem(), RecoverOptions{})
	defer dst.Close()

	var seen []int64
	checked := 0
	check := func(pos int64, e []byte) error {
		seen = append(seen, pos)
		if len(e) != 304 {
			t.Errorf("entry at %d: %d bytes, want the record with its trailer (304)", pos, len(e))
		}
		return nil
	}
	refuse := errors.New("refused")

	// admit refuses: every record was checked first, nothing is written.
	if _, err := dst.AppendRawChecked(0, raw, check, func() error { checked = len(seen); return refuse }); !errors.Is(err, refuse) {
		t.Fatalf("admit's refusal: got %v", err)
	}
	if checked != 3 || dst.WrittenOffset() != 0 {
		t.Fatalf("admit saw %d checked records (want 3); written %d (want 0)", checked, dst.WrittenOffset())
	}

	// check refuses the second record: admit is not called, nothing is written.
	seen = nil
	admitted := false
	stop := func(pos int64, e []byte) error {
		if pos == want[1].phys {
			return refuse
		}
		return check(pos, e)
	}
	if _, err := dst.AppendRawChecked(0, raw, stop, func() error { admitted = true; return nil }); !errors.Is(err, refuse) {
		t.Fatalf("check's refusal: got %v", err)
	}
	if admitted || dst.WrittenOffset() != 0 {
		t.Fatalf("after check refused: admitted %v, written %d", admitted, dst.WrittenOffset())
	}

	// A corrupt second record: refused as corrupt, check saw only the first.
	bad := slices.Clone(raw)
	bad[int(want[1].phys)+100] ^= 0xff
	seen = nil
	if _, err := dst.AppendRawChecked(0, bad, check, func() error { admitted = true; return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt range: got %v", err)
	}
	if admitted || dst.WrittenOffset() != 0 || !slices.Equal(seen, []int64{0}) {
		t.Fatalf("corrupt range: admitted %v, written %d, checked %v", admitted, dst.WrittenOffset(), seen)
	}

	// Both pass: written whole, each record checked once, in order.
	seen = nil
	got, err := dst.AppendRawChecked(0, raw, check, func() error { admitted = true; return nil })
	if err != nil || got != end || dst.WrittenOffset() != end {
		t.Fatalf("append: end %d, err %v, written %d; want %d", got, err, dst.WrittenOffset(), end)
	}
	if !admitted || !slices.Equal(seen, []int64{want[0].phys, want[1].phys, want[2].phys}) {
		t.Fatalf("admitted %v, checked %v", admitted, seen)
	}
	checkReadable(t, dst, want)
}
