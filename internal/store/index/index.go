package index

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/keelmq/keel/internal/vfs"
)

// Defaults and limits of Config.
const (
	DefaultHashSlots  = 5_000_000
	DefaultMaxEntries = 20_000_000
	// MaxFileBytes bounds HeaderSize + HashSlots*4 + MaxEntries*20.
	MaxFileBytes = 1 << 40
)

// Errors returned (wrapped) by the package.
var (
	ErrClosed  = errors.New("index: closed")
	ErrCorrupt = errors.New("index: corrupt file")
)

// Config configures the index.
type Config struct {
	FS         vfs.FS
	Dir        string // <root>/index
	HashSlots  int    // per file (default 5,000,000)
	MaxEntries int    // per file before rolling over (default 20,000,000)
	// LazySlotBlocks: a Flush leaves the changed slot blocks of the file
	// taking Puts for a later one while more than this many changed (see
	// deferSlots); 0: while more than an eighth of the table's blocks
	// did; negative: never.
	LazySlotBlocks int
	Logger         *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.FS == nil || c.Dir == "" {
		return errors.New("index: config needs FS and Dir")
	}
	if c.HashSlots == 0 {
		c.HashSlots = DefaultHashSlots
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = DefaultMaxEntries
	}
	if c.HashSlots < 1 || c.HashSlots > math.MaxInt32 || c.MaxEntries < 1 || c.MaxEntries >= math.MaxInt32 {
		return fmt.Errorf("index: HashSlots %d / MaxEntries %d out of range", c.HashSlots, c.MaxEntries)
	}
	if size := HeaderSize + int64(c.HashSlots)*SlotSize + int64(c.MaxEntries)*EntrySize; size > MaxFileBytes {
		return fmt.Errorf("index: files of %d bytes exceed %d", size, int64(MaxFileBytes))
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Index is the set of index files of a store. See the package
// documentation for the format and the concurrency contract.
type Index struct {
	cfg Config
	log *slog.Logger

	// flushMu serializes Flush with the operations that remove or cut
	// files. Lock order: flushMu, then mu.
	flushMu  sync.Mutex
	flushErr error // sticky
	parents  []string

	mu      sync.RWMutex
	files   []*file // ascending seq; the last one takes Puts
	nextSeq int64
	dirGen  uint64 // bumped when a file is created or removed
	dirSync uint64
	closed  bool
}

// Open opens (creating if needed) the index in cfg.Dir and recovers it.
func Open(cfg Config) (*Index, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ix := &Index{cfg: cfg, log: cfg.Logger, nextSeq: 1}
	if err := ix.ensureDir(); err != nil {
		return nil, err
	}
	if err := ix.load(); err != nil {
		ix.closeFiles()
		return nil, err
	}
	return ix, nil
}

func (ix *Index) path(name string) string { return filepath.Join(ix.cfg.Dir, name) }

func (ix *Index) ensureDir() error {
	fs := ix.cfg.FS
	for d := filepath.Clean(ix.cfg.Dir); ; d = filepath.Dir(d) {
		_, err := fs.Stat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("index: stat %s: %w", d, err)
		}
		if filepath.Dir(d) == d {
			break
		}
		ix.parents = append(ix.parents, filepath.Dir(d))
	}
	if err := fs.MkdirAll(ix.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("index: mkdir: %w", err)
	}
	return nil
}

// Put adds key (already "topic#key") for the record at physOffset stored at
// storeTimestampMs. Only one goroutine may call Put. Entries reach the page
// cache in batches (write-behind; Query sees them at once); Flush makes them
// durable.
func (ix *Index) Put(key string, physOffset int64, storeTimestampMs int64) error {
	if key == "" || physOffset < 0 {
		return fmt.Errorf("index: put %q at %d: empty key or negative offset", key, physOffset)
	}
	return ix.putHash(KeyHash(key), physOffset, storeTimestampMs)
}

// PutTopicKey is Put(topic + "#" + key, ...) without building the key (the
// dispatcher's put of every record key).
func (ix *Index) PutTopicKey(topic, key []byte, physOffset int64, storeTimestampMs int64) error {
	if len(key) == 0 || physOffset < 0 {
		return fmt.Errorf("index: put %q#%q at %d: empty key or negative offset", topic, key, physOffset)
	}
	return ix.putHash(TopicKeyHash(topic, key), physOffset, storeTimestampMs)
}

// putHash adds an entry of key hash hash (Put).
func (ix *Index) putHash(hash int32, physOffset int64, storeTimestampMs int64) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.closed {
		return ErrClosed
	}
	f, err := ix.writableFile(physOffset, storeTimestampMs)
	if err != nil {
		return err
	}
	if f.pendingEntries() >= pendingBatch {
		if err := f.writePending(); err != nil {
			return err
		}
	}
	slot := f.slotOf(hash)
	prev, err := f.slot(slot, f.scratch[:])
	if err != nil {
		return err
	}
	if prev < 0 || prev > f.hdr.entryCount {
		prev = 0 // cannot happen after recovery; never link to garbage
	}
	diff := (storeTimestampMs - f.hdr.beginTsMs) / 1000
	diff = min(max(diff, 0), math.MaxInt32)
	n := f.hdr.entryCount + 1
	f.addPending(n, entry{keyHash: hash, physOffset: physOffset, timeDiffS: int32(diff), prevIndex: prev}, slot)
	f.hdr.entryCount = n
	f.hdr.endTsMs = max(f.hdr.endTsMs, storeTimestampMs)
	f.hdr.endPhys = max(f.hdr.endPhys, physOffset)
	f.dirty = true
	return nil
}

// writableFile returns the file for the next Put, creating one when there is
// none, the last is full or phys is below the last one's endPhys. A new file's header is made durable before any
// entry is written to it, so its begin fields can be trusted. ix.mu must be
// held.
func (ix *Index) writableFile(phys, tsMs int64) (*file, error) {
	if n := len(ix.files); n > 0 {
		last := ix.files[n-1]
		if !last.full() && phys >= last.hdr.endPhys {
			return last, last.loadSlots()
		}
		if phys < last.hdr.endPhys {
			// Recovery relies on physOffset never decreasing within a file.
			ix.log.Warn("index: physical offset went backwards, starting a new file",
				"phys_offset", phys, "end_phys_offset", last.hdr.endPhys)
		}
		// Every slot update reaches the page cache before the table is
		// dropped (Query then reads the file). This waits for a Flush
		// writing slot blocks of last, once per file.
		if err := last.writeAllPending(); err != nil {
			return nil, err
		}
		last.setSlots(nil) // only the file taking Puts keeps its table
	}
	name := fileName(ix.nextSeq)
	vf, err := ix.cfg.FS.OpenFile(ix.path(name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("index: create file: %w", err)
	}
	f := &file{seq: ix.nextSeq, name: name, f: vf, maxEntries: int32(ix.cfg.MaxEntries)}
	f.hdr = header{beginTsMs: tsMs, endTsMs: tsMs, beginPhys: phys, endPhys: phys, slotCount: int32(ix.cfg.HashSlots)}
	if err := f.writeHeader(f.hdr); err == nil {
		err = f.sync()
	}
	if err != nil {
		_ = vf.Close()
		_ = ix.cfg.FS.Remove(ix.path(name))
		return nil, err
	}
	if int64(f.hdr.slotCount) <= maxCachedSlots {
		f.setSlots(make([]int32, f.hdr.slotCount)) // a new sparse file reads as zeros
	}
	ix.nextSeq++
	ix.files = append(ix.files, f)
	ix.dirGen++
	ix.log.Info("index: new file", "file", ix.path(name), "phys_offset", phys)
	return f, nil
}

// Query returns up to maxResults physical offsets of records indexed under key
// whose store time may lie in [beginMs, endMs], newest first, without
// duplicates. Only the 31-bit key hash is stored, so the results are
// candidates: the caller must check that each record carries the key.
func (ix *Index) Query(key string, maxResults int, beginMs, endMs int64) ([]int64, error) {
	if maxResults <= 0 || beginMs > endMs {
		return nil, nil
	}
	hash := KeyHash(key)
	var out []int64
	var seen dedup
	ix.mu.RLock()
	nfiles, closed := len(ix.files), ix.closed
	ix.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	for i := nfiles - 1; i >= 0 && len(out) < maxResults; i-- {
		var err error
		if out, err = ix.queryFile(i, hash, maxResults, beginMs, endMs, out, &seen); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// queryFile walks the chain of hash in the i-th file (if it still exists).
func (ix *Index) queryFile(i int, hash int32, maxResults int, beginMs, endMs int64, out []int64, seen *dedup) ([]int64, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.closed {
		return nil, ErrClosed
	}
	if i >= len(ix.files) {
		return out, nil
	}
	f := ix.files[i]
	// Entry times have second precision: an entry's true time is in
	// [t, t+999].
	if f.hdr.entryCount == 0 || f.hdr.beginTsMs > endMs || f.hdr.endTsMs+999 < beginMs {
		return out, nil
	}
	var buf [EntrySize]byte
	n, err := f.slot(f.slotOf(hash), buf[:])
	if err != nil {
		return nil, err
	}
	for n > 0 && n <= f.hdr.entryCount && len(out) < maxResults {
		e, err := f.entry(n, buf[:])
		if err != nil {
			return nil, err
		}
		if !e.plausible(n, f.hdr.beginPhys) {
			ix.log.Warn("index: invalid entry ends a chain", "file", ix.path(f.name), "entry", n)
			break
		}
		t := f.hdr.beginTsMs + int64(e.timeDiffS)*1000
		if e.keyHash == hash && t <= endMs && t+999 >= beginMs {
			if !seen.contains(out, e.physOffset) {
				out = append(out, e.physOffset)
			}
		}
		n = e.prevIndex
	}
	return out, nil
}

// MaxPhysOffset returns the highest physOffset indexed, or -1 when the index
// is empty. After a crash the store re-indexes the records at and after it;
// a record indexed twice is harmless because Query removes duplicates.
func (ix *Index) MaxPhysOffset() int64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for i := len(ix.files) - 1; i >= 0; i-- {
		if h := ix.files[i].hdr; h.entryCount > 0 {
			return h.endPhys
		}
	}
	return -1
}

func (ix *Index) closeFiles() {
	for _, f := range ix.files {
		_ = f.f.Close()
	}
}

// dedup answers "already in out?": by scanning out while it is short, by a
// map once it grows.
type dedup struct{ m map[int64]struct{} }

const dedupScanMax = 32

// contains reports whether p is in out, remembering p as seen.
func (d *dedup) contains(out []int64, p int64) bool {
	if d.m == nil && len(out) < dedupScanMax {
		return slices.Contains(out, p)
	}
	if d.m == nil {
		d.m = make(map[int64]struct{}, 2*len(out))
		for _, q := range out {
			d.m[q] = struct{}{}
		}
	}
	if _, ok := d.m[p]; ok {
		return true
	}
	d.m[p] = struct{}{}
	return false
}
