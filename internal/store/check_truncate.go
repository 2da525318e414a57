package store

import (
	"path/filepath"

	"github.com/keelmq/keel/internal/store/commitlog"
)

// A replica that stopped while truncating its CommitLog (truncate.go)
// leaves the intent <Dir>/truncate: its log ends at the intent's offset,
// whatever bytes are still on disk after it, and the next Open cuts them
// (with the ConsumeQueue and index entries past it, and the checkpoint).
// Check reads the intent the same way: the report says the truncation is
// in progress (a warning: Open finishes it), records after the point are
// neither checked nor counted, damage after it is not corruption, and
// queue entries past it are what Open drops.

// readTruncateIntent reads the intent; an intent that does not decode is
// a problem (Open refuses to start on it).
func (c *checker) readTruncateIntent() {
	off, ok, err := readTruncateIntent(c.fs, c.cfg.Dir)
	path := filepath.Join(c.cfg.Dir, truncateIntentName)
	if err != nil {
		c.rep.problem(KindUnreadableFile, path, 0, "%v", err)
		return
	}
	if !ok {
		return
	}
	c.rep.Truncating, c.rep.TruncateOffset = true, off
	c.rep.warn(KindTruncating, path, off,
		"the replica stopped while truncating its CommitLog at %d; the log ends there (opening the store finishes the truncation)", off)
	if c.haveCP {
		// What Open makes of the checkpoint before recovery.
		c.cp.PhysFlushed, c.cp.CQFlushed, c.cp.IndexFlushed = min(c.cp.PhysFlushed, off), min(c.cp.CQFlushed, off), min(c.cp.IndexFlushed, off)
	}
}

// pastTruncation reports whether the record at phys lies after the
// truncation point (it is not checked).
func (c *checker) pastTruncation(phys int64) bool {
	return c.rep.Truncating && phys >= c.rep.TruncateOffset
}

// capAtTruncation ends the verified log at the truncation point: the
// bytes after it are counted apart and what Verify found wrong there is
// dropped (those bytes are being removed).
func (c *checker) capAtTruncation(end int64, probs []commitlog.Problem) (int64, []commitlog.Problem) {
	if !c.rep.Truncating {
		return end, probs
	}
	off := c.rep.TruncateOffset
	if end > off {
		c.rep.PastTruncationBytes = end - off
		end = off
	}
	kept := probs[:0]
	for _, p := range probs {
		if p.Offset >= off {
			continue
		}
		kept = append(kept, p)
	}
	return end, kept
}
