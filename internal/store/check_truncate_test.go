package store

import (
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// TestCheckKnowsTruncationIntent: a replica's data directory whose store
// stopped mid-truncation (the intent <Dir>/truncate durable, the bytes
// after the point still on disk, one of them damaged) is reported as a
// truncation in progress, with the log ending at the point: not as
// corruption past it. After Open finishes the truncation, the check finds
// the cut log sound with no warning left.
func TestCheckKnowsTruncationIntent(t *testing.T) {
	fx := newCorruptFixture(t, true)
	cut := fx.msgs[20].phys
	if err := writeTruncateIntent(fx.fs, fx.cfg.Dir, cut); err != nil {
		t.Fatal(err)
	}
	fx.patch(t, fx.msgs[25].phys+100, 1, func(b []byte) { b[0] ^= 1 })

	rep, err := Check(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("problems past the truncation point: %v", rep.Problems)
	}
	if !rep.Truncating || rep.TruncateOffset != cut || rep.EndOffset != cut || rep.Records != 20 || rep.PastTruncationBytes <= 0 {
		t.Fatalf("report: truncating %v at %d, end %d, records %d, past %d", rep.Truncating, rep.TruncateOffset,
			rep.EndOffset, rep.Records, rep.PastTruncationBytes)
	}
	kinds := map[string]int{}
	for _, w := range rep.Warnings {
		kinds[w.Kind]++
	}
	if kinds[KindTruncating] != 1 || kinds[KindEntryPastEnd] != 10 {
		t.Fatalf("warnings %v", rep.Warnings)
	}

	s := mustOpen(t, fx.cfg) // finishes the truncation
	if w := s.Offset(Written); w != cut {
		t.Fatalf("open ended the log at %d, the check said %d", w, cut)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err = Check(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Warnings) != 0 || rep.Truncating || rep.EndOffset != cut || rep.Records != 20 {
		t.Fatalf("after open: problems %v warnings %v end %d records %d", rep.Problems, rep.Warnings, rep.EndOffset, rep.Records)
	}
}

// TestCheckBadTruncationIntent: an intent that does not decode is a
// problem (Open refuses to start on it), not ignored.
func TestCheckBadTruncationIntent(t *testing.T) {
	fx := newCorruptFixture(t, true)
	if err := vfs.WriteFileDurable(fx.fs, fx.cfg.Dir+"/"+truncateIntentName, []byte("keel-truncate 1\nnot a number\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Problems[0].Kind != KindUnreadableFile {
		t.Fatalf("bad intent: problems %v", rep.Problems)
	}
}
