package store

import (
	"testing"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// TestScanSystem: ScanSystem reads the system records from an offset to
// the written end (messages passed over), each with its end, also after
// a restart; from beyond the end it reads nothing.
func TestScanSystem(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	_, firstEnd := putSystem(t, s, &record.SystemRecord{Kind: record.KindKafkaTxn, Payload: []byte("a")})
	putBatch(t, s, "T", 0, "m", 1, 10)
	second, secondEnd := putSystem(t, s, &record.SystemRecord{Kind: record.KindKafkaTxn, Payload: []byte("b")})
	scan := func(s *Store, from int64) (got []string, ends []int64, to int64) {
		t.Helper()
		to, err := s.ScanSystem(from, func(phys, end int64, body []byte) error {
			r, err := record.DecodeSystem(body)
			if err != nil {
				return err
			}
			got, ends = append(got, string(r.Payload)), append(ends, end)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, ends, to
	}
	if got, ends, to := scan(s, 0); len(got) != 2 || got[0] != "a" || got[1] != "b" || ends[0] != firstEnd || ends[1] != secondEnd || to != secondEnd {
		t.Fatalf("from 0: %q ends %v to %d, want [a b] ends [%d %d] to %d", got, ends, to, firstEnd, secondEnd, secondEnd)
	}
	if got, _, _ := scan(s, firstEnd); len(got) != 1 || got[0] != "b" {
		t.Fatalf("from the first record's end: %q", got)
	}
	if got, _, to := scan(s, secondEnd+100); len(got) != 0 || to != secondEnd+100 {
		t.Fatalf("from beyond the end: %q to %d", got, to)
	}
	s.Close()
	s = mustOpen(t, cfg)
	defer s.Close()
	if got, _, _ := scan(s, second); len(got) != 1 || got[0] != "b" {
		t.Fatalf("after a restart, from the second record: %q", got)
	}
}
