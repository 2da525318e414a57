package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/keelmq/keel/internal/store"
)

// checkListed is how many problems (and warnings) keel check prints
// without -v; the counts by kind always cover all of them.
const checkListed = 5

// checkStore verifies the store under cfg.StorePathRootDir offline
// (store.Check: every record's checksum, ConsumeQueue entries against the
// CommitLog, index files), writes a summary to w and reports whether the
// store is sound. Warnings (states the next start repairs, such as a torn
// tail after a crash) are listed but do not make the store unsound; so are
// the traces of earlier repairs.
func (p *parts) checkStore(w io.Writer, verbose bool) (sound bool, err error) {
	rep, err := store.Check(storeConfig(p.cfg, p))
	if err != nil {
		return false, fmt.Errorf("check: %w", err)
	}
	dir := p.cfg.StorePathRootDir
	fmt.Fprintf(w, "store %s\n", dir)
	fmt.Fprintf(w, "  commitlog: %s, %s, %s, offsets [%d, %d)\n", count(rep.Segments, "segment"),
		count64(rep.Records, "record"), count64(rep.RecordBytes, "byte"), rep.MinOffset, rep.EndOffset)
	fmt.Fprintf(w, "  consumequeues: %s, %s; index: %s; clean shutdown: %v\n", count(rep.Queues, "queue"),
		count64(rep.QueueEntries, "entry", "entries"), count64(rep.IndexedKeys, "key"), rep.CleanShutdown)
	printRepairs(w, dir, rep, verbose)
	if rep.Truncating {
		fmt.Fprintf(w, "  truncation in progress: the replica stopped while cutting its CommitLog at %d; the log ends there (%s after it not checked; the next start finishes the cut)\n",
			rep.TruncateOffset, count64(rep.PastTruncationBytes, "verified byte"))
	}
	if rep.DeletedTopicRecords > 0 {
		fmt.Fprintf(w, "  deleted topics: %s kept until retention removes their segments\n", count64(rep.DeletedTopicRecords, "record"))
	}
	limit := checkListed
	if verbose {
		limit = len(rep.Problems) + len(rep.Warnings)
	}
	printKinds(w, "problem", rep.Problems, limit)
	printKinds(w, "warning", rep.Warnings, limit)
	p.listIsolated(w) // wire_check_isolated.go
	switch {
	case rep.OK():
		fmt.Fprintf(w, "OK: no problems (%s)\n", count(len(rep.Warnings), "warning"))
	default:
		fmt.Fprintf(w, "FAILED: %s, %s; docs/operations.md (\"Corruption\") says what to do\n",
			count(len(rep.Problems), "problem"), count(len(rep.Warnings), "warning"))
	}
	return rep.OK(), nil
}

// printRepairs prints what earlier repairs and recoveries left, if any,
// with every hole record if verbose.
func printRepairs(w io.Writer, dir string, rep store.Report, verbose bool) {
	if len(rep.Holes) > 0 || rep.LostEntries > 0 {
		holeBytes := int64(0)
		for _, h := range rep.Holes {
			holeBytes += h.Bytes
		}
		fmt.Fprintf(w, "  repaired: %s (%s) in the CommitLog; %s of messages lost to corruption (consumers skip them)\n",
			count(len(rep.Holes), "hole record"), count64(holeBytes, "byte"), count64(rep.LostEntries, "queue entry", "queue entries"))
	}
	if verbose {
		for _, h := range rep.Holes {
			fmt.Fprintf(w, "  hole: %s: offset %d: %d bytes\n", h.File, h.Offset, h.Bytes)
		}
	}
	if rep.QuarantineFiles > 0 {
		fmt.Fprintf(w, "  quarantine: %s, %s in %s (bytes removed from the CommitLog, kept for inspection)\n",
			count(rep.QuarantineFiles, "file"), count64(rep.QuarantineBytes, "byte"), filepath.Join(dir, "quarantine"))
	}
}

// count returns "1 thing" or "n things" (plural[0], if given, instead of
// thing+"s").
func count(n int, thing string, plural ...string) string { return count64(int64(n), thing, plural...) }

// count64 is count for an int64.
func count64(n int64, thing string, plural ...string) string {
	switch {
	case n == 1:
		return "1 " + thing
	case len(plural) > 0:
		return fmt.Sprintf("%d %s", n, plural[0])
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// printKinds prints the counts of ps by kind and the first limit of them.
func printKinds(w io.Writer, what string, ps []store.Problem, limit int) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintf(w, "%ss by kind:\n", what)
	for _, k := range store.CountKinds(ps) {
		fmt.Fprintf(w, "  %6d  %s\n", k.Count, k.Kind)
	}
	for _, pr := range ps[:min(limit, len(ps))] {
		fmt.Fprintf(w, "%s: %s\n", what, pr)
	}
	if n := len(ps) - limit; n > 0 {
		more := what + "s"
		if n == 1 {
			more = what
		}
		fmt.Fprintf(w, "... and %d more %s (keel check -v lists them all)\n", n, more)
	}
}
