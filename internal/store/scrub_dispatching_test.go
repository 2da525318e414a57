package store

import (
	"testing"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
	"github.com/keelmq/keel/internal/vfs"
)

// TestScrubberWaitsForRecordsBeingDispatched: the dispatcher writes a
// record's queue entries before the dispatched (visible) offset passes the
// record, so the scrubber can read an entry past that offset. Within the
// written log it is one being dispatched (here: a SYNC_MASTER's record the
// replicas have not confirmed), left for a later pass, not a problem; past
// the written log it is one.
func TestScrubberWaitsForRecordsBeingDispatched(t *testing.T) {
	s := mustOpen(t, syncMasterConfig(vfs.NewMem()))
	defer s.Close()
	putUnreplicated(t, s, newMsg("Disp", 0, "not yet shown", nil))
	vis, written := s.VisibleOffset(), s.Offset(Written)
	if vis >= written {
		t.Fatalf("visible %d, written %d: the record is not between them", vis, written)
	}
	ref := queueRef{topic: "Disp", id: 0}
	size := int32(written - vis - commitlog.TrailerBytes)
	s.scrub.lastPhys = -1
	if _, later := s.scrubEntry(ref, 0, consumequeue.Entry{PhysOffset: vis, Size: size}); !later {
		t.Fatal("an entry of a record being dispatched was not left for later")
	}
	if st := s.ScrubStatus(); st.Problems != 0 {
		t.Fatalf("an entry of a record being dispatched is a problem: %+v", st.Recent)
	}
	if _, later := s.scrubEntry(ref, 1, consumequeue.Entry{PhysOffset: written, Size: size}); later {
		t.Fatal("an entry past the written log was left for later")
	}
	if st := s.ScrubStatus(); st.Problems != 1 {
		t.Fatalf("an entry past the written log: %d problems, want 1", st.Problems)
	}
}
