package commitlog

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/store/watermark"
	"github.com/keelmq/keel/internal/vfs"
)

// Sizes of the framing around records.
const (
	TrailerBytes = 4 // CRC32-C after each record
	BlankBytes   = 8 // blank marker closing a segment
	headerBytes  = 8 // TOTALSIZE + MAGICCODE
	nameDigits   = 20
)

// MinSegmentBytes is the smallest accepted segment size.
const MinSegmentBytes = 4096

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32-C of rec, the value stored after it.
func Checksum(rec []byte) uint32 { return crc32.Checksum(rec, crcTable) }

// Errors.
var (
	// ErrFailed wraps every error returned after a write or fsync failed.
	ErrFailed = errors.New("commitlog: log failed after a write or fsync error (read-only until restart)")
	// ErrCorrupt is wrapped by errors for entries that fail verification.
	ErrCorrupt = errors.New("commitlog: corrupt entry")
	// ErrNoRecord is returned for an offset that holds no record: it lies in
	// the blank tail of a closed segment or before the first segment.
	ErrNoRecord = errors.New("commitlog: no record at offset")
	// ErrBeyondEnd is returned for a read past the written offset.
	ErrBeyondEnd = errors.New("commitlog: read past the written offset")
	// ErrTooLarge is returned by Append for a record that cannot fit in a segment.
	ErrTooLarge = errors.New("commitlog: record too large for a segment")
	// ErrNotRecovered is returned by Append before Recover ran.
	ErrNotRecovered = errors.New("commitlog: not recovered")
	// ErrUnknownType is wrapped by errors for a record whose checksum
	// is valid but whose magic names no record type this version knows
	// (package record). It is not ErrCorrupt: such a record is never cut
	// as a torn tail nor skipped.
	ErrUnknownType = record.ErrUnknownType
	// ErrNoSpace is wrapped by Append errors for a batch that was not
	// written because the disk is full; the log stays usable (see the
	// package documentation).
	ErrNoSpace = errors.New("commitlog: no space left on device; nothing of the batch was written")
)

// Config configures a Log.
type Config struct {
	FS           vfs.FS
	Dir          string // directory of the segment files
	SegmentBytes int64  // size of every segment (mapedFileSizeCommitLog)
	// CheckRecord, if set, is an extra structural check of a record whose
	// size, magic and CRC are valid (the store passes message.Check).
	CheckRecord func(rec []byte) error
	// MaxRecordBytes, if > 0, bounds the size ReadRecord accepts from a
	// record header, so a read at an arbitrary offset cannot allocate
	// more.
	MaxRecordBytes int64
	// Notify, if set, is called (without locks held) after the written or
	// the flushed offset advanced, or the log failed. It must not block.
	Notify func()
	// NotifyFlushedOnly leaves Notify out after a write: the caller acts
	// on the flushed offset only (a SYNC_FLUSH store's dispatcher, which
	// never passes what is flushed), and a wake-up per write would find
	// nothing to do.
	NotifyFlushedOnly bool
	// OnFlush, if set, is called after each successful fdatasync round that
	// made bytes > 0 durable, with its duration (metrics). It runs under the
	// flush lock: it must be cheap and never block.
	OnFlush func(d time.Duration, bytes int64)
	// AfterFlushed, if set, is called by the acknowledger (RunAcknowledger)
	// after every flush, once it answered the flushed watermark's waiters:
	// a store whose Replicated watermark follows Flushed and a replication
	// service's reports moves it there, so the puts a flush completes are
	// answered at once. It runs without the log's locks and must not block.
	AfterFlushed func()
	// BeforeFlush, if set, is called by RunFlusher without locks held
	// before a flush that a waiter asked for (not a periodic one). It may
	// block briefly so that appends in progress join the flush (group
	// commit); it must return promptly when they are done.
	BeforeFlush func()
	// PrefillBytes, if > 0, is how far ahead of the writer the segment being
	// written is kept zero-filled and synced while flushes are small (see
	// prefill.go); RunPrefiller must run. 0 disables it.
	PrefillBytes int64
	// CacheWindowBytes, if > 0, is how much of the log behind the flushed
	// offset keeps its page cache; older pages are released (see cache.go).
	// RunCacheTrimmer must run. 0 leaves the page cache to the kernel.
	CacheWindowBytes int64
	// ReadWindowBytes, if > 0, is how many of the most recently written
	// bytes the log also keeps in memory, to serve reads of them without a
	// pread (window.go; above 1 MiB, rounded down to whole MiB). 0
	// disables it.
	ReadWindowBytes int64
	Logger          *slog.Logger
}

func (c *Config) validate() error {
	if c.FS == nil || c.Dir == "" {
		return errors.New("commitlog: config needs FS and Dir")
	}
	if c.SegmentBytes < MinSegmentBytes || c.SegmentBytes > 1<<40 {
		return fmt.Errorf("commitlog: segment size %d out of range [%d, 2^40]", c.SegmentBytes, MinSegmentBytes)
	}
	return nil
}

type segment struct {
	base int64
	path string
	f    vfs.File
}

// Log is the CommitLog. See the package documentation.
type Log struct {
	cfg    Config
	logger *slog.Logger

	segMu sync.RWMutex
	segs  []*segment // guarded by segMu; contiguous, sorted by base

	// Owned by the single writer.
	wbuf      []byte
	recovered bool
	noSpace   bool   // the last append failed with ErrNoSpace (log once per series)
	holes     []Hole // found by the last Verify (offline checks)

	// The written and flushed watermarks (end of written, of durable
	// bytes; exclusive). Waiters of written are answered by the writer,
	// those of flushed by the acknowledger (ack.go).
	written *watermark.Mark
	flushed *watermark.Mark
	failure atomic.Pointer[error]

	flushMu sync.Mutex // serializes Flush with segment removal
	// syncMu makes the fdatasyncs of segments that may run at once (the
	// flusher's, the prefiller's, a sealed segment's) one at a time, each
	// judged by the log's state after it (syncSegment): Linux reports a
	// writeback error once per open file, and the segments' handles are
	// shared, so of two overlapping calls only one may see it.
	syncMu sync.Mutex
	kick   chan struct{}
	// flusherParked: RunFlusher is parked with everything flushed;
	// flusherWake wakes it after a write (flush.go).
	flusherParked atomic.Bool
	flusherWake   chan struct{}

	// The flushed mark (mark.go), written under flushMu (or by Recover,
	// before any flusher runs).
	mark        vfs.File // nil until first written
	markAt      int64    // the offset the mark holds (0: none claimed)
	markNoSpace bool     // the last mark write found the disk full (log once)

	prefillMu    sync.Mutex
	prefillCond  *sync.Cond // on prefillMu: a zero-filled chunk is done
	pf           prefillState
	prefillAhead atomic.Int64 // pf.filled, read without the lock
	prefillKick  chan struct{}

	cacheDropped atomic.Int64 // page cache released below this offset (cache.go)
	cacheOff     atomic.Bool  // a release failed: leave the page cache to the kernel
	cacheKick    chan struct{}

	ackKick chan struct{} // one pending wake-up for the acknowledger (ack.go)

	win readWindow // the most recent bytes, in memory (window.go)
	// Reads of the consuming path (readUpTo and the readers' reads that
	// may use the window) served from the window and from the file.
	windowHits, windowMisses atomic.Int64
}

// Open opens (creating if needed) the log directory and its segment files.
// It does not verify them: call Recover before Append.
func Open(cfg Config) (*Log, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Log{cfg: cfg, logger: cfg.Logger, kick: make(chan struct{}, 1), flusherWake: make(chan struct{}, 1), prefillKick: make(chan struct{}, 1), cacheKick: make(chan struct{}, 1)}
	l.prefillCond = sync.NewCond(&l.prefillMu)
	l.ackKick = make(chan struct{}, 1)
	l.win = newReadWindow(cfg.ReadWindowBytes)
	l.written = watermark.New("written", nil)
	l.flushed = watermark.New("flushed", l.RequestFlush)
	if l.logger == nil {
		l.logger = slog.New(slog.DiscardHandler)
	}
	if err := vfs.MkdirAllDurable(cfg.FS, cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("commitlog: %w", err)
	}
	if err := l.openSegments(); err != nil {
		l.closeFiles()
		return nil, err
	}
	return l, nil
}

// SegmentName returns the file name of the segment starting at base.
func SegmentName(base int64) string { return fmt.Sprintf("%0*d", nameDigits, base) }

// ParseSegmentName returns the base offset named by a segment file name.
func ParseSegmentName(name string) (int64, bool) {
	if len(name) != nameDigits {
		return 0, false
	}
	v, err := strconv.ParseInt(name, 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

func (l *Log) openSegments() error {
	names, err := l.cfg.FS.List(l.cfg.Dir)
	if err != nil {
		return fmt.Errorf("commitlog: list %s: %w", l.cfg.Dir, err)
	}
	for _, name := range names {
		base, ok := ParseSegmentName(name)
		if !ok {
			if name != MarkName {
				l.logger.Warn("commitlog: ignoring unexpected file", "file", filepath.Join(l.cfg.Dir, name))
			}
			continue
		}
		if base%l.cfg.SegmentBytes != 0 {
			return fmt.Errorf("commitlog: segment %s is not aligned to the segment size %d (was the store written with another mapedFileSizeCommitLog?)", name, l.cfg.SegmentBytes)
		}
		if n := len(l.segs); n > 0 && l.segs[n-1].base+l.cfg.SegmentBytes != base {
			return fmt.Errorf("commitlog: segment %s does not follow %s: segment files are missing", name, filepath.Base(l.segs[n-1].path))
		}
		path := filepath.Join(l.cfg.Dir, name)
		f, err := l.cfg.FS.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("commitlog: open segment %s: %w", path, err)
		}
		l.segs = append(l.segs, &segment{base: base, path: path, f: f})
		size, err := f.Size()
		if err != nil {
			return fmt.Errorf("commitlog: size of %s: %w", path, err)
		}
		if size > l.cfg.SegmentBytes {
			return fmt.Errorf("commitlog: segment %s is %d bytes, larger than the segment size %d", path, size, l.cfg.SegmentBytes)
		}
	}
	return nil
}

func (l *Log) closeFiles() error {
	l.segMu.Lock()
	defer l.segMu.Unlock()
	var first error
	for _, s := range l.segs {
		if err := s.f.Close(); err != nil && first == nil {
			first = fmt.Errorf("commitlog: close %s: %w", s.path, err)
		}
	}
	l.segs = nil
	return first
}

// Close calls back the AfterFlush waiters left (see finishAcks) and closes
// the segment files. It does not flush.
func (l *Log) Close() error {
	l.finishAcks()
	err := l.closeFiles()
	if merr := l.closeMark(); merr != nil && err == nil { // after closeFiles: flushMu is taken before segMu
		err = merr
	}
	return err
}

// SegmentBytes returns the configured segment size.
func (l *Log) SegmentBytes() int64 { return l.cfg.SegmentBytes }

// SegmentStart returns the start of the segment holding off.
func (l *Log) SegmentStart(off int64) int64 { return off - off%l.cfg.SegmentBytes }

// WrittenOffset returns the end of the written bytes.
func (l *Log) WrittenOffset() int64 { return l.written.Load() }

// WindowReads returns how many reads that may use the read window it
// served (hits) and how many went to the file (misses: the window is off,
// or no longer holds those bytes).
func (l *Log) WindowReads() (hits, misses int64) {
	return l.windowHits.Load(), l.windowMisses.Load()
}

// FlushedOffset returns the end of the bytes known durable.
func (l *Log) FlushedOffset() int64 { return l.flushed.Load() }

// Written is the written watermark: the end of the bytes written to the
// segment files (page cache). Its waiters are called back by the writer,
// right after the write. Callers must not move it.
func (l *Log) Written() *watermark.Mark { return l.written }

// Flushed is the flushed watermark: the end of the bytes a successful
// fdatasync covered. Waiting on it asks for a flush; its waiters are
// called back by the acknowledger (RunAcknowledger). Callers must not move
// it.
func (l *Log) Flushed() *watermark.Mark { return l.flushed }

// MinOffset returns the first offset still held (start of the first
// segment), or the written offset if there is no segment.
func (l *Log) MinOffset() int64 {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	if len(l.segs) == 0 {
		return l.written.Load()
	}
	return l.segs[0].base
}

// Err returns nil, or an error wrapping ErrFailed and the first write or
// fsync error.
func (l *Log) Err() error {
	if p := l.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// syncSegment makes s durable (fdatasync) under syncMu. It fails the
// log with what (a description) when the call fails, and answers the
// log's failure when an earlier call (whose error this one could not see
// again) failed it.
func (l *Log) syncSegment(s *segment, what string) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if err := s.f.Sync(); err != nil {
		return l.fail(fmt.Errorf("commitlog: fdatasync %s%s: %w", s.path, what, err))
	}
	return l.Err()
}

func (l *Log) fail(err error) error {
	wrapped := fmt.Errorf("%w: %w", ErrFailed, err)
	l.win.stop()
	if l.failure.CompareAndSwap(nil, &wrapped) {
		l.logger.Error("commitlog: write or fsync failed; the store is read-only until restart", "err", err)
	}
	l.notify()
	l.written.Fail(l.Err())
	l.flushed.Fail(l.Err())
	return l.Err()
}

func (l *Log) notify() {
	if l.cfg.Notify != nil {
		l.cfg.Notify()
	}
}

// Segment describes one segment file.
type Segment struct {
	Base int64
	Path string
}

// Segments lists the segment files.
func (l *Log) Segments() []Segment {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	out := make([]Segment, len(l.segs))
	for i, s := range l.segs {
		out[i] = Segment{Base: s.base, Path: s.path}
	}
	return out
}

// segmentLocked returns the segment holding off, or nil. segMu must be held.
func (l *Log) segmentLocked(off int64) *segment {
	if len(l.segs) == 0 || off < l.segs[0].base {
		return nil
	}
	i := (off - l.segs[0].base) / l.cfg.SegmentBytes
	if i >= int64(len(l.segs)) {
		return nil
	}
	return l.segs[i]
}

// ReadAt reads len(p) bytes at off. The range must lie in one segment and
// below the written offset.
func (l *Log) ReadAt(p []byte, off int64) error {
	_, err := l.readUpTo(p, off, len(p))
	return err
}

// readUpTo reads at least need and at most len(p) bytes at off and returns
// how many it read: a closed segment's file ends after its blank marker.
// Bytes the read window holds are copied from it (window.go).
func (l *Log) readUpTo(p []byte, off int64, need int) (int, error) {
	return l.read(p, off, need, true)
}

// read is readUpTo, from the read window too if window (a re-read after a
// failed verification reads the file only).
func (l *Log) read(p []byte, off int64, need int, window bool) (int, error) {
	written := l.written.Load()
	if off < 0 || off+int64(need) > written {
		return 0, fmt.Errorf("commitlog: read [%d, %d) beyond written offset %d: %w", off, off+int64(need), written, ErrBeyondEnd)
	}
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	s := l.segmentLocked(off)
	if s == nil {
		return 0, fmt.Errorf("commitlog: offset %d is not held (min %d): %w", off, l.minLocked(), ErrNoRecord)
	}
	rel := off - s.base
	if rel+int64(len(p)) > l.cfg.SegmentBytes {
		return 0, fmt.Errorf("commitlog: read [%d, %d) crosses the end of segment %s: %w", off, off+int64(len(p)), s.path, ErrCorrupt)
	}
	if window {
		if n, ok := l.win.read(p, off, need, written); ok {
			l.windowHits.Add(1)
			return n, nil
		}
		l.windowMisses.Add(1)
	}
	n, err := s.f.ReadAt(p, rel)
	if n >= need {
		return n, nil
	}
	if (err == io.EOF || err == nil) && l.written.Load() >= s.base+l.cfg.SegmentBytes {
		// Past the end of a closed segment's file: its blank tail.
		return 0, fmt.Errorf("commitlog: read [%d, %d) past the end of %s: %w", off, off+int64(need), s.path, ErrNoRecord)
	}
	if err == io.EOF || err == nil {
		return 0, fmt.Errorf("commitlog: read [%d, %d): %s is shorter than the written offset %d: %w", off, off+int64(need), s.path, l.written.Load(), ErrCorrupt)
	}
	return 0, fmt.Errorf("commitlog: read %s at %d: %w", s.path, rel, err)
}

func (l *Log) minLocked() int64 {
	if len(l.segs) == 0 {
		return l.written.Load()
	}
	return l.segs[0].base
}

// VerifyEntry checks that entry (a record followed by its CRC trailer)
// starting at CommitLog offset off is a valid record of size bytes.
func (l *Log) VerifyEntry(entry []byte, off int64, size int32) error {
	return verifyEntry(entry, off, size, l.cfg.CheckRecord)
}

func verifyEntry(entry []byte, off int64, size int32, check func([]byte) error) error {
	if size < headerBytes || len(entry) != int(size)+TrailerBytes {
		return fmt.Errorf("commitlog: entry at %d: bad size %d: %w", off, size, ErrCorrupt)
	}
	total := int32(be32(entry[0:4]))
	magic := int32(be32(entry[4:8]))
	if magic == message.MagicBlank {
		return fmt.Errorf("commitlog: offset %d is a blank marker: %w", off, ErrNoRecord)
	}
	if magic == MagicHole {
		return fmt.Errorf("commitlog: offset %d: %w", off, ErrHole)
	}
	if total != size {
		return fmt.Errorf("commitlog: entry at %d: size %d, want %d: %w", off, total, size, ErrCorrupt)
	}
	rec := entry[:size]
	if got, want := Checksum(rec), be32(entry[size:]); got != want {
		return fmt.Errorf("commitlog: entry at %d: crc %#08x, stored %#08x: %w", off, got, want, ErrCorrupt)
	}
	if record.TypeOfMagic(magic) == record.Unknown {
		return fmt.Errorf("commitlog: record at %d: %w", off, record.UnknownMagicError(magic))
	}
	if check != nil {
		if err := check(rec); err != nil {
			return fmt.Errorf("commitlog: entry at %d: %w: %w", off, ErrCorrupt, err)
		}
	}
	return nil
}

// ReadEntry reads and verifies the record of size bytes at off into buf
// (grown if needed) and returns the record without its trailer. It returns
// an error wrapping ErrCorrupt if verification fails and ErrNoRecord if off
// holds no record.
func (l *Log) ReadEntry(off int64, size int32, buf []byte) ([]byte, error) {
	return l.readEntry(off, size, buf, true)
}

// readEntry is ReadEntry, from the read window too if window.
func (l *Log) readEntry(off int64, size int32, buf []byte, window bool) ([]byte, error) {
	if size < headerBytes || int64(size)+TrailerBytes+BlankBytes > l.cfg.SegmentBytes {
		return nil, fmt.Errorf("commitlog: entry at %d: size %d out of range: %w", off, size, ErrCorrupt)
	}
	n := int(size) + TrailerBytes
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := l.read(buf, off, n, window); err != nil {
		return nil, err
	}
	if err := l.VerifyEntry(buf, off, size); err != nil {
		return nil, err
	}
	return buf[:size], nil
}

// ReadRecord reads and verifies the record at off without knowing its size.
func (l *Log) ReadRecord(off int64, buf []byte) ([]byte, error) {
	return l.readRecord(off, buf, true)
}

// readRecord is ReadRecord, from the read window too if window.
func (l *Log) readRecord(off int64, buf []byte, window bool) ([]byte, error) {
	var hdr [headerBytes]byte
	if _, err := l.read(hdr[:], off, headerBytes, window); err != nil {
		return nil, err
	}
	size := int32(be32(hdr[0:4]))
	if int32(be32(hdr[4:8])) == message.MagicBlank {
		return nil, fmt.Errorf("commitlog: offset %d is a blank marker: %w", off, ErrNoRecord)
	}
	if int32(be32(hdr[4:8])) == MagicHole {
		return nil, fmt.Errorf("commitlog: offset %d: %w", off, ErrHole)
	}
	if l.cfg.MaxRecordBytes > 0 && int64(size) > l.cfg.MaxRecordBytes {
		return nil, fmt.Errorf("commitlog: offset %d: record size %d above the limit %d: %w", off, size, l.cfg.MaxRecordBytes, ErrCorrupt)
	}
	return l.readEntry(off, size, buf, window)
}

func u32(v int32) uint32 { return uint32(v) }

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func put32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}
