package consumequeue

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/keelmq/keel/internal/vfs"
)

// Defaults and limits of Config.
const (
	DefaultEntriesPerSegment = 300_000
	DefaultTailCacheEntries  = 32_768
	// DefaultWriteBehindEntries is about one page of entries.
	DefaultWriteBehindEntries = 4096 / EntrySize
	// MaxEntriesPerSegment keeps a segment under 2 GiB.
	MaxEntriesPerSegment = (1<<31 - 1) / EntrySize
)

// Errors returned (wrapped) by the package.
var (
	ErrClosed         = errors.New("consumequeue: queue closed")
	ErrCorrupt        = errors.New("consumequeue: corrupt entry")
	ErrInvalidEntry   = errors.New("consumequeue: invalid entry")
	ErrConflict       = errors.New("consumequeue: re-appended entry differs from the stored one")
	ErrGap            = errors.New("consumequeue: append would leave a gap")
	ErrOffsetTooSmall = errors.New("consumequeue: offset below the queue's min offset")
)

// Config configures one queue.
type Config struct {
	FS      vfs.FS
	Dir     string // <root>/consumequeue/<topic>/<queueId>
	Topic   string // for logs
	QueueID int32  // for logs
	// EntriesPerSegment is the number of entries per file (default
	// 300,000). It must not change for an existing queue.
	EntriesPerSegment int
	// TailCacheEntries is how many of the newest entries Get serves from
	// memory (default 32,768, that is 640 KiB per busy queue; at most
	// EntriesPerSegment). Older entries are read with pread. Negative
	// disables the cache.
	TailCacheEntries int
	// WriteBehindEntries is how many appended entries are collected in
	// memory before one pwrite hands them to the page cache (default
	// DefaultWriteBehindEntries; Flush, truncation and segment roll-over
	// write them earlier). Entries are durable only after Flush either way;
	// see the package documentation.
	WriteBehindEntries int
	Logger             *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.FS == nil || c.Dir == "" {
		return errors.New("consumequeue: config needs FS and Dir")
	}
	if c.EntriesPerSegment == 0 {
		c.EntriesPerSegment = DefaultEntriesPerSegment
	}
	if c.EntriesPerSegment < 1 || c.EntriesPerSegment > MaxEntriesPerSegment {
		return fmt.Errorf("consumequeue: EntriesPerSegment %d out of range [1, %d]", c.EntriesPerSegment, MaxEntriesPerSegment)
	}
	if c.TailCacheEntries == 0 {
		c.TailCacheEntries = DefaultTailCacheEntries
	}
	c.TailCacheEntries = min(max(c.TailCacheEntries, 0), c.EntriesPerSegment)
	if c.WriteBehindEntries == 0 {
		c.WriteBehindEntries = DefaultWriteBehindEntries
	}
	c.WriteBehindEntries = max(c.WriteBehindEntries, 1)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Queue is the ConsumeQueue of one (topic, queueId). See the package
// documentation for the format and the concurrency contract.
type Queue struct {
	cfg Config
	log *slog.Logger
	per int64 // entries per segment

	// flushMu serializes Flush with the operations that truncate, remove or
	// close segment files. Lock order: flushMu, then mu.
	flushMu  sync.Mutex
	flushErr error    // sticky: a failed fdatasync leaves the page cache undefined
	parents  []string // directories whose entries Open created, synced by the first Flush

	mu        sync.RWMutex
	segs      []*segment // contiguous, ascending base
	minOffset int64
	maxOffset int64
	last      Entry // entry at maxOffset-1, if hasLast
	hasLast   bool
	dirGen    uint64 // bumped when a segment file is created or removed
	dirSynced uint64 // dirGen covered by the last SyncDir
	tailBase  int64  // queue offset of tail[0]
	tail      []byte // entries [tailBase, maxOffset), when the cache is on
	// pend holds the newest appended entries not yet written to the last
	// segment: slots [last.count-len(pend)/EntrySize, last.count).
	pend   []byte
	closed bool
}

// Open opens (creating if needed) the queue in cfg.Dir and recovers it: a
// torn last entry, trailing zero entries and anything after the first
// invalid entry (size <= 0) of the last two segments are removed durably.
func Open(cfg Config) (*Queue, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	q := &Queue{
		cfg: cfg,
		log: cfg.Logger.With("topic", cfg.Topic, "queue_id", cfg.QueueID),
		per: int64(cfg.EntriesPerSegment),
	}
	if err := q.ensureDir(); err != nil {
		return nil, err
	}
	if err := q.load(); err != nil {
		q.closeFiles()
		return nil, err
	}
	q.tailBase = q.maxOffset
	return q, nil
}

func (q *Queue) errorf(format string, args ...any) error {
	return fmt.Errorf("consumequeue: %s/%d: "+format, append([]any{q.cfg.Topic, q.cfg.QueueID}, args...)...)
}

// ensureDir creates cfg.Dir and remembers the parents whose new entries the
// first Flush must make durable.
func (q *Queue) ensureDir() error {
	fs := q.cfg.FS
	for d := filepath.Clean(q.cfg.Dir); ; d = filepath.Dir(d) {
		_, err := fs.Stat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return q.errorf("stat %s: %w", d, err)
		}
		if filepath.Dir(d) == d {
			break
		}
		q.parents = append(q.parents, filepath.Dir(d))
	}
	if err := fs.MkdirAll(q.cfg.Dir, 0o700); err != nil {
		return q.errorf("mkdir: %w", err)
	}
	return nil
}

func (q *Queue) path(name string) string { return filepath.Join(q.cfg.Dir, name) }

// load opens the segment files and recovers the end of the queue.
func (q *Queue) load() error {
	names, err := q.cfg.FS.List(q.cfg.Dir)
	if err != nil {
		return q.errorf("list: %w", err)
	}
	var bases []int64
	for _, name := range names {
		base, ok := parseSegmentName(name)
		if !ok || base%q.per != 0 {
			q.log.Warn("consumequeue: ignoring unexpected file", "file", q.path(name))
			continue
		}
		bases = append(bases, base)
	}
	for i := 1; i < len(bases); i++ {
		if bases[i] != bases[i-1]+q.per {
			return q.errorf("segments %s and %s are not adjacent (missing file, or EntriesPerSegment changed from the %d in use?): %w",
				segmentName(bases[i-1]), segmentName(bases[i]), q.per, ErrCorrupt)
		}
	}
	for _, base := range bases {
		f, err := q.cfg.FS.OpenFile(q.path(segmentName(base)), os.O_RDWR, 0o600)
		if err != nil {
			return q.errorf("open segment: %w", err)
		}
		q.segs = append(q.segs, &segment{base: base, name: segmentName(base), f: f})
	}
	if err := q.recoverSegments(); err != nil {
		return err
	}
	return q.recoverBounds()
}

// recoverSegments finds the number of valid entries of each segment and cuts
// the queue after the first segment that is not full.
func (q *Queue) recoverSegments() error {
	full := q.per * EntrySize
	for i, s := range q.segs {
		size, err := s.f.Size()
		if err != nil {
			return q.errorf("size of %s: %w", s.name, err)
		}
		if size > full {
			return q.errorf("segment %s has %d bytes, more than %d entries (was EntriesPerSegment changed?): %w",
				s.name, size, q.per, ErrCorrupt)
		}
		count := size / EntrySize
		if size != full || i >= len(q.segs)-2 {
			if count, err = q.validPrefix(s, count, i == 0); err != nil {
				return err
			}
		}
		s.count, s.synced = count, count
		if count*EntrySize != size {
			q.log.Warn("consumequeue: dropping torn or invalid tail", "file", q.path(s.name),
				"valid_entries", count, "bytes", size)
			if err := q.truncateSegment(s, count); err != nil {
				return err
			}
		}
		if count < q.per && i < len(q.segs)-1 {
			return q.removeSegmentsAfter(i)
		}
	}
	return nil
}

// validPrefix returns how many of the first n entries of s are valid. Fillers
// are valid only as a leading run of the first segment.
func (q *Queue) validPrefix(s *segment, n int64, first bool) (int64, error) {
	buf := make([]byte, min(n, 4096)*EntrySize) // not 80 KiB for each of thousands of short queues at Open
	leading := first
	for done := int64(0); done < n; {
		chunk := min(n-done, 4096)
		b := buf[:chunk*EntrySize]
		if _, err := s.f.ReadAt(b, done*EntrySize); err != nil && err != io.EOF {
			return 0, q.errorf("read %s: %w", s.name, err)
		}
		for i := int64(0); i < chunk; i++ {
			e := getEntry(b[i*EntrySize:])
			leading = leading && e.isFiller()
			if !e.valid() || (e.isFiller() && !leading) {
				return done + i, nil
			}
		}
		done += chunk
	}
	return n, nil
}

// truncateSegment durably cuts s to count entries.
func (q *Queue) truncateSegment(s *segment, count int64) error {
	if err := s.f.Truncate(count * EntrySize); err != nil {
		return q.errorf("truncate %s: %w", s.name, err)
	}
	if err := s.f.Sync(); err != nil {
		return q.errorf("fdatasync %s: %w", s.name, err)
	}
	s.count, s.synced = count, count
	return nil
}

// removeSegmentsAfter durably removes the segments after segs[i].
func (q *Queue) removeSegmentsAfter(i int) error {
	for _, s := range q.segs[i+1:] {
		q.log.Warn("consumequeue: removing segment after an incomplete one", "file", q.path(s.name))
		_ = s.f.Close()
		if err := q.cfg.FS.Remove(q.path(s.name)); err != nil {
			return q.errorf("remove %s: %w", s.name, err)
		}
	}
	q.segs = q.segs[:i+1]
	if err := q.cfg.FS.SyncDir(q.cfg.Dir); err != nil {
		return q.errorf("sync dir: %w", err)
	}
	return nil
}

// recoverBounds sets min, max and the last entry from the segments.
func (q *Queue) recoverBounds() error {
	if len(q.segs) == 0 {
		return nil
	}
	first, last := q.segs[0], q.segs[len(q.segs)-1]
	q.maxOffset = last.base + last.count
	q.minOffset = first.base
	for q.minOffset < first.base+first.count {
		e, err := q.readLocked(q.minOffset)
		if err != nil {
			return err
		}
		if !e.isFiller() {
			break
		}
		q.minOffset++
	}
	return q.reloadLast()
}

// reloadLast reads the entry at maxOffset-1 into q.last.
func (q *Queue) reloadLast() error {
	q.hasLast = false
	if len(q.segs) == 0 || q.maxOffset == q.segs[0].base {
		return nil
	}
	e, err := q.readLocked(q.maxOffset - 1)
	if err != nil {
		return err
	}
	q.last, q.hasLast = e, !e.isFiller()
	return nil
}

func (q *Queue) closeFiles() {
	for _, s := range q.segs {
		_ = s.f.Close()
	}
}
