package main

import (
	"fmt"
	"io"

	"github.com/keelmq/keel/internal/store"
)

// checkStore verifies the store under cfg.StorePathRootDir offline
// (store.Check: every record's checksum, ConsumeQueue entries against the
// CommitLog, index files), writes a summary to w and reports whether the
// store is sound. Warnings (states the next start repairs, such as a torn
// tail after a crash) are listed but do not make the store unsound.
func (p *parts) checkStore(w io.Writer) (sound bool, err error) {
	rep, err := store.Check(storeConfig(p.cfg, p))
	if err != nil {
		return false, fmt.Errorf("check: %w", err)
	}
	fmt.Fprintf(w, "store %s\n", p.cfg.StorePathRootDir)
	fmt.Fprintf(w, "  commitlog: %d segments, %d records, %d bytes, offsets [%d, %d)\n",
		rep.Segments, rep.Records, rep.RecordBytes, rep.MinOffset, rep.EndOffset)
	fmt.Fprintf(w, "  consumequeues: %d queues, %d entries; index: %d keys; clean shutdown: %v\n",
		rep.Queues, rep.QueueEntries, rep.IndexedKeys, rep.CleanShutdown)
	for _, pr := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", pr)
	}
	for _, pr := range rep.Problems {
		fmt.Fprintf(w, "problem: %s\n", pr)
	}
	p.listIsolated(w) // wire_check_isolated.go
	if rep.OK() {
		fmt.Fprintf(w, "OK: no problems (%d warnings)\n", len(rep.Warnings))
	} else {
		fmt.Fprintf(w, "FAILED: %d problems, %d warnings\n", len(rep.Problems), len(rep.Warnings))
	}
	return rep.OK(), nil
}
