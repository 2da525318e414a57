package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"

	"github.com/keelmq/keel/internal/store/commitlog"
)

// Comparing two replicas' CommitLogs offline (`keel check --compare`): the
// committed log of a store is its records that verify, from its oldest
// segment to the end of the last valid entry (a torn tail is not
// committed; a corrupt entry in the middle is compared like any bytes, and
// so shows as a difference). Two replicas of one group must hold the same
// bytes at the same offsets wherever both logs reach.

// compareChunkBytes is how much of each log Compare reads at a time.
const compareChunkBytes = 1 << 20

// LogExtent is where a store's committed CommitLog starts and ends.
type LogExtent struct {
	Dir       string
	MinOffset int64
	EndOffset int64
}

// Comparison is the result of Compare.
type Comparison struct {
	A, B LogExtent
	// From and To bound the range compared: where both logs hold bytes.
	From, To int64
	// Differs: the logs differ at FirstDiff, in the entries starting at
	// EntryA and EntryB (-1 when the bytes there are not a whole entry).
	Differs   bool
	FirstDiff int64
	EntryA    int64
	EntryB    int64
}

// Identical reports whether the logs hold the same bytes wherever both
// reach.
func (c Comparison) Identical() bool { return !c.Differs }

// Longer returns "A" or "B" for the log whose committed end is further, or
// "" if they end at the same offset.
func (c Comparison) Longer() string {
	switch {
	case c.A.EndOffset > c.B.EndOffset:
		return "A"
	case c.B.EndOffset > c.A.EndOffset:
		return "B"
	}
	return ""
}

// readOnlyLog is a stopped store's CommitLog opened to be read: its lock
// taken, every change kept in memory (nothing reaches the disk), every
// entry verified to find the committed end.
type readOnlyLog struct {
	log    *commitlog.Log
	end    int64
	probs  []commitlog.Problem
	unlock func()
}

func openReadOnlyLog(cfg Config) (*readOnlyLog, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := cfg.FS.Stat(filepath.Join(cfg.Dir, commitLogDir)); err != nil {
		return nil, fmt.Errorf("store: %s is not a store directory: %w", cfg.Dir, err)
	}
	lock, err := cfg.FS.Lock(filepath.Join(cfg.Dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", cfg.Dir, err)
	}
	fs := newOverlayFS(cfg.FS)
	l, err := commitlog.Open(commitlog.Config{FS: fs, Dir: filepath.Join(cfg.Dir, commitLogDir),
		SegmentBytes: cfg.CommitLogSegmentBytes, CheckRecord: checkRecord})
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("store: %s: %w", cfg.Dir, err)
	}
	end, probs, err := l.Verify(nil)
	if err != nil {
		l.Close()
		lock.Close()
		return nil, fmt.Errorf("store: verify %s: %w", cfg.Dir, err)
	}
	// A replica that crashed while truncating ends where the truncation
	// goes (the next Open finishes it, truncate.go).
	if off, ok, err := readTruncateIntent(cfg.FS, cfg.Dir); err != nil {
		l.Close()
		lock.Close()
		return nil, err
	} else if ok && off < end {
		end = off
	}
	return &readOnlyLog{log: l, end: end, probs: probs, unlock: func() { l.Close(); lock.Close() }}, nil
}

func (r *readOnlyLog) close() { r.unlock() }

// Compare compares the committed CommitLogs of two stopped stores
// (replicas of one group) and reports the first byte where they differ,
// up to the shorter committed end. Both must have the same segment size.
// Nothing is written to either.
func Compare(a, b Config) (Comparison, error) {
	if a.CommitLogSegmentBytes != b.CommitLogSegmentBytes {
		return Comparison{}, fmt.Errorf("store: compare: segment sizes %d and %d differ (mapedFileSizeCommitLog must be the same on replicas)",
			a.CommitLogSegmentBytes, b.CommitLogSegmentBytes)
	}
	la, err := openReadOnlyLog(a)
	if err != nil {
		return Comparison{}, err
	}
	defer la.close()
	lb, err := openReadOnlyLog(b)
	if err != nil {
		return Comparison{}, err
	}
	defer lb.close()
	c := Comparison{A: LogExtent{a.Dir, la.log.MinOffset(), la.end}, B: LogExtent{b.Dir, lb.log.MinOffset(), lb.end},
		FirstDiff: -1, EntryA: -1, EntryB: -1}
	c.From, c.To = max(c.A.MinOffset, c.B.MinOffset), min(c.A.EndOffset, c.B.EndOffset)
	if c.From >= c.To {
		return c, nil
	}
	if c.From%a.CommitLogSegmentBytes != 0 {
		return c, fmt.Errorf("store: compare: the logs start at %d and %d, not at segment starts", c.A.MinOffset, c.B.MinOffset)
	}
	return c, compareLogs(la.log, lb.log, &c)
}

// compareLogs walks both logs entry by entry from c.From to c.To.
func compareLogs(a, b *commitlog.Log, c *Comparison) error {
	var bufA, bufB []byte
	for pos := c.From; pos < c.To; {
		rawA, nextA, errA := a.ReadRaw(pos, c.To, compareChunkBytes, bufA)
		rawB, nextB, errB := b.ReadRaw(pos, c.To, compareChunkBytes, bufB)
		if errA != nil || errB != nil {
			// An entry header that does not parse: compare the bytes as
			// they are, up to the segment end.
			return compareBytes(a, b, pos, c, errA, errB)
		}
		bufA, bufB = rawA, rawB
		k := min(len(rawA), len(rawB))
		if i := firstDiff(rawA[:k], rawB[:k]); i >= 0 {
			c.Differs, c.FirstDiff = true, pos+int64(i)
			c.EntryA, c.EntryB = entryAt(rawA, pos, c.FirstDiff), entryAt(rawB, pos, c.FirstDiff)
			return nil
		}
		if len(rawA) == len(rawB) && nextA == nextB {
			pos = nextA
			continue
		}
		if k == 0 {
			return fmt.Errorf("store: compare: no progress at offset %d", pos)
		}
		// One range stopped earlier (its size bound): both have an entry
		// boundary there, since their bytes so far are the same.
		pos += int64(k)
	}
	return nil
}

// compareBytes compares raw bytes at pos, where one log's entry header
// could not be read as one.
func compareBytes(a, b *commitlog.Log, pos int64, c *Comparison, errA, errB error) error {
	segEnd := a.SegmentStart(pos) + a.SegmentBytes()
	n := int(min(compareChunkBytes, segEnd-pos, c.To-pos))
	pa, pb := make([]byte, n), make([]byte, n)
	if err := a.ReadAt(pa, pos); err != nil {
		return fmt.Errorf("store: compare at %d: %w (reading entries: %v, %v)", pos, err, errA, errB)
	}
	if err := b.ReadAt(pb, pos); err != nil {
		return fmt.Errorf("store: compare at %d: %w (reading entries: %v, %v)", pos, err, errA, errB)
	}
	if i := firstDiff(pa, pb); i >= 0 {
		c.Differs, c.FirstDiff = true, pos+int64(i)
		if errA == nil {
			c.EntryA = pos
		}
		if errB == nil {
			c.EntryB = pos
		}
		return nil
	}
	return fmt.Errorf("store: compare: cannot read the entries at %d: %v, %v", pos, errA, errB)
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// entryAt returns the start of the entry of raw (whole entries from off)
// that holds offset at, or -1.
func entryAt(raw []byte, off, at int64) int64 {
	for i := 0; i+8 <= len(raw); {
		n := int64(int32(binary.BigEndian.Uint32(raw[i:]))) + commitlog.TrailerBytes
		if n <= commitlog.TrailerBytes {
			return -1
		}
		if at < off+int64(i)+n || i+int(n) >= len(raw) {
			return off + int64(i)
		}
		i += int(n)
	}
	return -1
}
