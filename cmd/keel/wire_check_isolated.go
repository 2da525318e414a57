package main

import (
	"fmt"
	"io"
	"time"

	"github.com/keelmq/keel/internal/store"
)

// listIsolated prints the store's registry of isolated records (records
// withheld from consumers because they failed verification; their bytes
// are still in the CommitLog, so the check reports them as problems too)
// and how to repair them. An unreadable registry is reported and does not
// fail the check: it is a record for operators, not data.
func (p *parts) listIsolated(w io.Writer) {
	recs, err := store.ReadIsolated(storeConfig(p.cfg, p))
	if err != nil {
		fmt.Fprintf(w, "isolated: cannot read the registry: %v\n", err)
		return
	}
	for _, r := range recs {
		where := fmt.Sprintf("%s/%d offset %d", r.Topic, r.QueueID, r.QueueOffset)
		if r.QueueID < 0 {
			where = "queue unknown"
		}
		fmt.Fprintf(w, "isolated: %s at CommitLog offset %d (%d bytes), found by %s %s: %s\n",
			where, r.PhysOffset, r.Size, r.FoundBy, r.FoundAt.UTC().Format(time.RFC3339), r.Reason)
	}
	if len(recs) > 0 {
		fmt.Fprintln(w, "isolated records are withheld from consumers: --repair-from-replica restores them from an in-sync replica; "+
			"a start with --repair-corruption replaces them by hole records (their messages are lost); see docs/operations.md")
	}
}
