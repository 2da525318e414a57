package main

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/keelmq/keel/internal/replication"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// keel check --compare DIR2 and --repair-from-replica DIR2: two replicas'
// data directories, both of stopped brokers (docs/replication.md,
// "Operations").

// replicaConfig is the store configuration of another data directory with
// this broker.conf's sizes.
func (p *parts) replicaConfig(dir string) store.Config {
	c := storeConfig(p.cfg, p)
	c.Dir = dir
	return c
}

// compareStores compares the committed CommitLogs of the data directory
// and dir2 and reports the first differing byte; identical reports whether
// they agree wherever both reach.
func (p *parts) compareStores(w io.Writer, dir2 string) (identical bool, err error) {
	a, b := storeConfig(p.cfg, p), p.replicaConfig(dir2)
	c, err := store.Compare(a, b)
	if err != nil {
		return false, fmt.Errorf("check --compare: %w", err)
	}
	fmt.Fprintf(w, "A %s: committed CommitLog [%d, %d)\n", a.Dir, c.A.MinOffset, c.A.EndOffset)
	fmt.Fprintf(w, "B %s: committed CommitLog [%d, %d)\n", b.Dir, c.B.MinOffset, c.B.EndOffset)
	printEpochs(w, a.Dir, b.Dir)
	longer := "they end at the same offset"
	switch c.Longer() {
	case "A":
		longer = fmt.Sprintf("A is longer, by %d bytes [%d, %d)", c.A.EndOffset-c.B.EndOffset, c.B.EndOffset, c.A.EndOffset)
	case "B":
		longer = fmt.Sprintf("B is longer, by %d bytes [%d, %d)", c.B.EndOffset-c.A.EndOffset, c.A.EndOffset, c.B.EndOffset)
	}
	switch {
	case c.Differs:
		seg := c.FirstDiff - c.FirstDiff%a.CommitLogSegmentBytes
		fmt.Fprintf(w, "DIFFER: first differing byte at offset %d (segment %s, position %d), in the entry at %s in A and %s in B; %s\n",
			c.FirstDiff, filepath.Join("commitlog", fmt.Sprintf("%020d", seg)), c.FirstDiff-seg, entryText(c.EntryA), entryText(c.EntryB), longer)
		return false, nil
	case c.From >= c.To:
		fmt.Fprintf(w, "NOTHING IN COMMON: the logs share no offsets; %s\n", longer)
		return false, nil
	}
	fmt.Fprintf(w, "IDENTICAL over [%d, %d) (up to the shorter committed end); %s\n", c.From, c.To, longer)
	return true, nil
}

func entryText(off int64) string {
	if off < 0 {
		return "(no whole entry)"
	}
	return fmt.Sprint(off)
}

// printEpochs prints both directories' epoch histories (replication).
func printEpochs(w io.Writer, a, b string) {
	ha, errA := replication.LoadHistory(vfs.OS{}, replication.EpochFile(a))
	hb, errB := replication.LoadHistory(vfs.OS{}, replication.EpochFile(b))
	if errA != nil || errB != nil {
		fmt.Fprintf(w, "epochs: cannot read: %v %v\n", errA, errB)
		return
	}
	fmt.Fprintf(w, "epochs: A %s, B %s\n", historyText(ha), historyText(hb))
}

func historyText(h replication.History) string {
	if len(h) == 0 {
		return "(none)"
	}
	parts := make([]string, len(h))
	for i, e := range h {
		parts[i] = fmt.Sprintf("%d@%d", e.Epoch, e.Start)
	}
	return strings.Join(parts, " ")
}

// repairFromReplica replaces the corrupt entries in the middle of the data
// directory's CommitLog with dir2's bytes, after the operator confirms
// (yes, or "yes" typed on in). It reports whether the store is sound
// afterwards (keel check clean).
func (p *parts) repairFromReplica(w io.Writer, in io.Reader, dir2 string, yes bool) (bool, error) {
	cfg, rcfg := storeConfig(p.cfg, p), p.replicaConfig(dir2)
	plan, err := store.PlanRepairFromReplica(cfg, rcfg)
	if err != nil {
		return false, fmt.Errorf("check --repair-from-replica: %w", err)
	}
	plan, err = p.checkSameGroup(plan, cfg.Dir, rcfg.Dir)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(w, "repair %s from the replica %s\n", cfg.Dir, rcfg.Dir)
	total := int64(0)
	for _, r := range plan.Ranges {
		total += r.End - r.Offset
		fmt.Fprintf(w, "  damaged: %s: offsets [%d, %d) (%s): the replica's bytes there verify (%s)\n",
			r.File, r.Offset, r.End, count64(r.End-r.Offset, "byte"), count(r.Entries, "entry", "entries"))
	}
	for _, u := range plan.Unrepairable {
		fmt.Fprintf(w, "  cannot repair from this replica: %s\n", u)
	}
	if len(plan.Ranges) == 0 {
		fmt.Fprintln(w, "nothing to repair from the replica")
		return len(plan.Unrepairable) == 0, nil
	}
	if !yes {
		fmt.Fprintf(w, "Replace %s, %s, of %s with the replica's bytes (the damaged bytes are kept in %s)? Type yes: ",
			count(len(plan.Ranges), "range"), count64(total, "byte"), cfg.Dir, filepath.Join(cfg.Dir, "quarantine"))
		answer, _ := bufio.NewReader(in).ReadString('\n')
		if strings.TrimSpace(answer) != "yes" {
			fmt.Fprintln(w, "\nnot confirmed: nothing was changed")
			return false, nil
		}
	}
	done, err := store.RepairFromReplica(cfg, plan)
	for _, r := range done.Ranges {
		if r.Quarantine != "" {
			fmt.Fprintf(w, "  replaced [%d, %d); the damaged bytes are in %s\n", r.Offset, r.End, r.Quarantine)
		}
	}
	if err != nil {
		return false, fmt.Errorf("check --repair-from-replica: %w", err)
	}
	if done.DroppedIsolated > 0 {
		fmt.Fprintf(w, "  %s dropped from the isolated-records registry: they verify again\n", count(done.DroppedIsolated, "record"))
	}
	fmt.Fprintln(w, "checking the repaired store:")
	return p.checkStore(w, false)
}

// checkSameGroup keeps only the ranges that lie in one epoch both epoch
// histories agree on: the bytes are the same master's.
func (p *parts) checkSameGroup(plan store.ReplicaRepair, dir, dir2 string) (store.ReplicaRepair, error) {
	ha, err := replication.LoadHistory(vfs.OS{}, replication.EpochFile(dir))
	if err != nil {
		return plan, err
	}
	hb, err := replication.LoadHistory(vfs.OS{}, replication.EpochFile(dir2))
	if err != nil {
		return plan, err
	}
	if len(ha) == 0 || len(hb) == 0 {
		return plan, fmt.Errorf("check --repair-from-replica: %s and %s must both be members of a broker group (an epoch history in %s)",
			dir, dir2, filepath.Join("replication", "epochs"))
	}
	kept := plan.Ranges[:0]
	for _, r := range plan.Ranges {
		ea, endA, okA := ha.EpochAt(r.Offset)
		eb, endB, okB := hb.EpochAt(r.Offset)
		switch {
		case !okA || !okB || ea != eb:
			plan.Unrepairable = append(plan.Unrepairable, fmt.Sprintf("%s: offset %d: the epoch histories disagree there (%s here, %s on the replica)",
				r.File, r.Offset, historyText(ha), historyText(hb)))
		case (endA >= 0 && endA < r.End) || (endB >= 0 && endB < r.End):
			plan.Unrepairable = append(plan.Unrepairable, fmt.Sprintf("%s: offset %d: the range crosses an epoch boundary", r.File, r.Offset))
		default:
			kept = append(kept, r)
		}
	}
	plan.Ranges = kept
	return plan, nil
}
