package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// Repair from a replica (`keel check --repair-from-replica`): a corrupt
// entry in the middle of a stopped store's CommitLog is replaced, in
// place, by the bytes a replica of the same group holds at the same
// offsets, instead of by a hole record. The replica's bytes are taken
// only when every entry of the range verifies (size, CRC32-C, known type,
// structure, and the offset each record names is its own), when the
// record before the damage ends with the same CRC trailer in both logs,
// and when the range ends where the store holds a valid entry (or a
// segment end) byte-identical to the replica's there: the replacement
// fits between intact neighbours that prove the two logs are the same
// log. No offset moves, so ConsumeQueue entries, message IDs and consumer
// offsets stay valid and the damaged messages are readable again. The
// damaged bytes are first copied to quarantine/<segment>.<position>.replaced
// (synced); each replacement is written and fdatasync'ed before the next;
// records of the isolated-records registry inside a replaced range are
// dropped from it; and the store is verified again afterwards.
//
// The caller checks that the two stores are replicas of one group (the
// epoch histories) and that the operator confirmed.

// maxRepairScanBytes bounds the replica bytes read for one range: a
// damaged range never crosses a segment end.
const maxRepairScanBytes = 1 << 20

// RepairRange is one damaged range of a store's CommitLog and what the
// replica holds there.
type RepairRange struct {
	File       string // the store's segment file
	Offset     int64  // CommitLog offset of the first damaged byte
	End        int64  // the first intact entry after it (or the segment end)
	Entries    int    // replica entries that replace [Offset, End)
	Quarantine string // after a repair: the copy of the damaged bytes
	raw        []byte // the replica's bytes [Offset, End)
}

// ReplicaRepair is the plan (or the result) of a repair from a replica.
type ReplicaRepair struct {
	Dir, ReplicaDir string
	Ranges          []RepairRange
	// Unrepairable lists damage the replica cannot mend, each with why (a
	// torn tail is not damage: the next start cuts it).
	Unrepairable []string
	// DroppedIsolated counts registry records dropped after a repair.
	DroppedIsolated int
}

// PlanRepairFromReplica finds the corrupt entries in the middle of the
// stopped store cfg's CommitLog and, for each, the replica's bytes that
// would replace it. Nothing is written.
func PlanRepairFromReplica(cfg, replica Config) (ReplicaRepair, error) {
	if cfg.CommitLogSegmentBytes != replica.CommitLogSegmentBytes {
		return ReplicaRepair{}, fmt.Errorf("store: repair from replica: segment sizes %d and %d differ", cfg.CommitLogSegmentBytes, replica.CommitLogSegmentBytes)
	}
	own, err := openReadOnlyLog(cfg)
	if err != nil {
		return ReplicaRepair{}, err
	}
	defer own.close()
	rep, err := openReadOnlyLog(replica)
	if err != nil {
		return ReplicaRepair{}, err
	}
	defer rep.close()
	plan := ReplicaRepair{Dir: cfg.Dir, ReplicaDir: replica.Dir}
	for _, p := range own.probs {
		if p.TornTail {
			continue
		}
		r, err := replacement(own, rep, p.Offset)
		if err != nil {
			plan.Unrepairable = append(plan.Unrepairable, fmt.Sprintf("%s: offset %d: %v", p.File, p.Offset, err))
			continue
		}
		r.File = p.File
		plan.Ranges = append(plan.Ranges, r)
	}
	return plan, nil
}

// errFound stops a walk of the replica's entries.
var errFound = errors.New("found")

// replacement reads the replica's entries from bad on until the store has
// an intact entry identical to the replica's (or the segment ends).
func replacement(own, rep *readOnlyLog, bad int64) (RepairRange, error) {
	seg := own.log.SegmentBytes()
	segEnd := own.log.SegmentStart(bad) + seg
	switch {
	case bad < rep.log.MinOffset():
		return RepairRange{}, fmt.Errorf("the replica's log starts at %d, after the damage", rep.log.MinOffset())
	case bad >= rep.end:
		return RepairRange{}, fmt.Errorf("the replica's committed log ends at %d, before the damage", rep.end)
	}
	if bad%seg != 0 {
		if err := sameBytes(own, rep, bad-commitlog.TrailerBytes, commitlog.TrailerBytes); err != nil {
			return RepairRange{}, fmt.Errorf("the record before the damage differs: %w", err)
		}
	}
	r := RepairRange{Offset: bad, End: -1}
	for pos := bad; r.End < 0; {
		raw, _, err := rep.log.ReadRaw(pos, rep.end, maxRepairScanBytes, nil)
		if err != nil {
			return RepairRange{}, fmt.Errorf("the replica's entry at %d: %w", pos, err)
		}
		if len(raw) == 0 {
			return RepairRange{}, fmt.Errorf("the replica's committed log ends at %d, inside the damage", pos)
		}
		_, err = commitlog.WalkRaw(raw, pos, seg, func(p int64, e []byte, blank bool) error {
			if !blank {
				rec := e[:len(e)-commitlog.TrailerBytes]
				if err := checkRecord(rec); err != nil {
					return fmt.Errorf("the replica's record at %d: %w", p, err)
				}
				if own := ownOffset(rec); own != p {
					return fmt.Errorf("the replica's record at %d names offset %d", p, own)
				}
			}
			r.raw = append(r.raw, e...)
			r.Entries++
			q := p + int64(len(e))
			if blank {
				q = segEnd
			}
			if q == segEnd || q >= own.end || intactAt(own, rep, q) {
				r.End = q
				return errFound
			}
			pos = q
			return nil
		})
		if err != nil && !errors.Is(err, errFound) {
			return RepairRange{}, err
		}
	}
	return r, nil
}

// intactAt reports whether the store holds at q a valid entry (or blank
// marker) byte-identical to the replica's there.
func intactAt(own, rep *readOnlyLog, q int64) bool {
	if q >= rep.end {
		return false
	}
	a, _, err := own.log.ReadRaw(q, own.end, 1, nil)
	if err != nil || len(a) < 8 {
		return false
	}
	b, _, err := rep.log.ReadRaw(q, rep.end, 1, nil)
	if err != nil || string(a) != string(b) {
		return false
	}
	if size := int32(binary.BigEndian.Uint32(a)); int32(binary.BigEndian.Uint32(a[4:])) != message.MagicBlank {
		return own.log.VerifyEntry(a, q, size) == nil
	}
	return true
}

// sameBytes checks that both logs hold the same n bytes at off.
func sameBytes(own, rep *readOnlyLog, off int64, n int) error {
	a, b := make([]byte, n), make([]byte, n)
	if err := own.log.ReadAt(a, off); err != nil {
		return err
	}
	if err := rep.log.ReadAt(b, off); err != nil {
		return err
	}
	if string(a) != string(b) {
		return fmt.Errorf("%x here, %x on the replica at offset %d", a, b, off)
	}
	return nil
}

// RepairFromReplica applies plan (from PlanRepairFromReplica, whose store
// must not have been started since) to the stopped store cfg, durably,
// and verifies the store afterwards.
func RepairFromReplica(cfg Config, plan ReplicaRepair) (ReplicaRepair, error) {
	cfg.setDefaults()
	lock, err := cfg.FS.Lock(filepath.Join(cfg.Dir, lockName))
	if err != nil {
		return plan, fmt.Errorf("store: %s: %w", cfg.Dir, err)
	}
	qdir := filepath.Join(cfg.Dir, quarantineDir)
	for i := range plan.Ranges {
		r := &plan.Ranges[i]
		if r.Quarantine, err = replaceRange(cfg, qdir, *r); err != nil {
			lock.Close()
			return plan, err
		}
	}
	plan.DroppedIsolated, err = dropIsolated(cfg, plan.Ranges)
	lock.Close()
	if err != nil {
		return plan, err
	}
	after, err := openReadOnlyLog(cfg)
	if err != nil {
		return plan, err
	}
	defer after.close()
	for _, p := range after.probs {
		for _, r := range plan.Ranges {
			if p.Offset >= r.Offset && p.Offset < r.End {
				return plan, fmt.Errorf("store: after the repair the CommitLog still fails at %d: %s", p.Offset, p.Msg)
			}
		}
	}
	return plan, nil
}

// replaceRange copies the damaged bytes to quarantine, then writes the
// replica's bytes in their place and syncs the segment.
func replaceRange(cfg Config, qdir string, r RepairRange) (string, error) {
	base := r.Offset - r.Offset%cfg.CommitLogSegmentBytes
	f, err := cfg.FS.OpenFile(r.File, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("store: repair: open %s: %w", r.File, err)
	}
	defer f.Close()
	old := make([]byte, r.End-r.Offset)
	n, err := f.ReadAt(old, r.Offset-base)
	if n == 0 && err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("store: repair: read %s: %w", r.File, err)
	}
	q, err := quarantineCopy(cfg.FS, qdir, fmt.Sprintf("%s.%d.replaced", filepath.Base(r.File), r.Offset-base), old[:n])
	if err != nil {
		return "", err
	}
	if _, err := f.WriteAt(r.raw, r.Offset-base); err != nil {
		return q, fmt.Errorf("store: repair: write %s at %d: %w", r.File, r.Offset-base, err)
	}
	if err := f.Sync(); err != nil {
		return q, fmt.Errorf("store: repair: fdatasync %s: %w", r.File, err)
	}
	return q, nil
}

// quarantineCopy writes b durably to a new file name in dir (name.1,
// name.2, ... if it exists: earlier evidence is never overwritten).
func quarantineCopy(fs vfs.FS, dir, name string, b []byte) (string, error) {
	if err := vfs.MkdirAllDurable(fs, dir, 0o700); err != nil {
		return "", fmt.Errorf("store: repair: %w", err)
	}
	path := filepath.Join(dir, name)
	for n := 1; ; n++ {
		if _, err := fs.Stat(path); errors.Is(err, os.ErrNotExist) {
			break
		}
		path = filepath.Join(dir, fmt.Sprintf("%s.%d", name, n))
	}
	if err := vfs.WriteFileDurable(fs, path, b, 0o600); err != nil {
		return "", fmt.Errorf("store: repair: %w", err)
	}
	return path, nil
}

// dropIsolated removes from the registry the records inside the repaired
// ranges: they verify again.
func dropIsolated(cfg Config, ranges []RepairRange) (int, error) {
	recs, err := ReadIsolated(cfg)
	if err != nil || len(recs) == 0 {
		return 0, err
	}
	kept := slices.DeleteFunc(slices.Clone(recs), func(r IsolatedRecord) bool {
		for _, x := range ranges {
			if r.PhysOffset >= x.Offset && r.PhysOffset < x.End {
				return true
			}
		}
		return false
	})
	if len(kept) == len(recs) {
		return 0, nil
	}
	b, err := json.MarshalIndent(isolatedFile{Version: 1, Records: kept}, "", " ")
	if err == nil {
		err = vfs.WriteFileDurable(cfg.FS, filepath.Join(cfg.Dir, isolatedName), b, 0o600)
	}
	if err != nil {
		return 0, fmt.Errorf("store: repair: rewrite %s: %w", isolatedName, err)
	}
	return len(recs) - len(kept), nil
}
