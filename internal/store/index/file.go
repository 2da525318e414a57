package index

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/keelmq/keel/internal/vfs"
)

// Sizes of the on-disk structures.
const (
	HeaderSize = 40
	SlotSize   = 4
	EntrySize  = 20
)

// header is the first 40 bytes of a file.
type header struct {
	beginTsMs  int64 // store time of entry 1
	endTsMs    int64 // newest store time indexed (ms; second precision after a recovery)
	beginPhys  int64 // physOffset of entry 1
	endPhys    int64 // highest physOffset indexed
	slotCount  int32 // hash slots of this file
	entryCount int32 // entries 1..entryCount are in use
}

func (h *header) encode(b []byte) {
	_ = b[HeaderSize-1]
	binary.BigEndian.PutUint64(b[0:], uint64(h.beginTsMs))
	binary.BigEndian.PutUint64(b[8:], uint64(h.endTsMs))
	binary.BigEndian.PutUint64(b[16:], uint64(h.beginPhys))
	binary.BigEndian.PutUint64(b[24:], uint64(h.endPhys))
	binary.BigEndian.PutUint32(b[32:], uint32(h.slotCount))
	binary.BigEndian.PutUint32(b[36:], uint32(h.entryCount))
}

func decodeHeader(b []byte) header {
	_ = b[HeaderSize-1]
	return header{
		beginTsMs:  int64(binary.BigEndian.Uint64(b[0:])),
		endTsMs:    int64(binary.BigEndian.Uint64(b[8:])),
		beginPhys:  int64(binary.BigEndian.Uint64(b[16:])),
		endPhys:    int64(binary.BigEndian.Uint64(b[24:])),
		slotCount:  int32(binary.BigEndian.Uint32(b[32:])),
		entryCount: int32(binary.BigEndian.Uint32(b[36:])),
	}
}

// entryPrevOff is the offset of prevIndex within an entry.
const entryPrevOff = 16

// entry is one 20-byte index entry.
type entry struct {
	keyHash    int32
	physOffset int64
	timeDiffS  int32 // seconds since the file's beginTsMs
	prevIndex  int32 // previous entry of the same slot, 0 = none
}

func (e *entry) encode(b []byte) {
	_ = b[EntrySize-1]
	binary.BigEndian.PutUint32(b[0:], uint32(e.keyHash))
	binary.BigEndian.PutUint64(b[4:], uint64(e.physOffset))
	binary.BigEndian.PutUint32(b[12:], uint32(e.timeDiffS))
	binary.BigEndian.PutUint32(b[entryPrevOff:], uint32(e.prevIndex))
}

func decodeEntry(b []byte) entry {
	_ = b[EntrySize-1]
	return entry{
		keyHash:    int32(binary.BigEndian.Uint32(b[0:])),
		physOffset: int64(binary.BigEndian.Uint64(b[4:])),
		timeDiffS:  int32(binary.BigEndian.Uint32(b[12:])),
		prevIndex:  int32(binary.BigEndian.Uint32(b[entryPrevOff:])),
	}
}

// plausible reports whether e can be entry n of a file that begins at
// beginPhys: what recovery and Query check before trusting an entry.
func (e entry) plausible(n int32, beginPhys int64) bool {
	return e.keyHash >= 0 && e.prevIndex >= 0 && e.prevIndex < n &&
		e.timeDiffS >= 0 && e.physOffset >= beginPhys
}

// KeyHash is the hash an index file stores for key: 32-bit FNV-1a of the
// key's bytes with the sign bit cleared.
func KeyHash(key string) int32 {
	return int32(fnv1a(fnvOffset, key) & math.MaxInt32)
}

// TopicKeyHash is KeyHash(topic + "#" + key), without building the string.
func TopicKeyHash(topic, key []byte) int32 {
	h := fnv1a(fnvOffset, topic)
	h = (h ^ '#') * fnvPrime
	return int32(fnv1a(h, key) & math.MaxInt32)
}

const (
	fnvOffset = uint32(2166136261)
	fnvPrime  = uint32(16777619)
)

// fnv1a continues the 32-bit FNV-1a hash h over b.
func fnv1a[B string | []byte](h uint32, b B) uint32 {
	for i := 0; i < len(b); i++ {
		h ^= uint32(b[i])
		h *= fnvPrime
	}
	return h
}

// file is one index file.
type file struct {
	seq        int64
	name       string
	f          vfs.File
	hdr        header // current, in memory
	maxEntries int32
	dirty      bool // hdr or entries changed since the last Flush
	scratch    [EntrySize]byte

	// Write-behind (the file taking Puts): entries written+1..entryCount
	// are in pend; writePending hands them to the page cache. When the
	// slot table is not cached, the slot updates made with them are in
	// pendSlots, in order, and writePending writes them after the entries.
	written   int32
	pend      []byte
	pendSlots []slotSet

	// slots caches the slot table of the file taking Puts (nil: not
	// cached), so a Put reads no slot from the file. Its elements are
	// accessed atomically: Flush encodes them without ix.mu. The slice
	// itself is set under ix.mu and slotWriteMu.
	slots []int32
	// dirtyBlocks marks the slot blocks (see blockOf) holding updates of
	// the cached table not yet handed to a writer; set by Put, guarded by
	// ix.mu.
	dirtyBlocks bitmap
	// slotWriteMu guards inflight and blockBuf and is held while slot
	// blocks are encoded and written, so that two writers (Flush without
	// ix.mu, a roll-over or TruncatePhys with it) never write a block out
	// of order. Lock order: ix.mu, then slotWriteMu.
	slotWriteMu sync.Mutex
	// inflight marks the blocks taken from dirtyBlocks (under ix.mu, with
	// the entries that dirtied them written) and not yet written.
	inflight bitmap
	blockBuf []byte

	// Deferred slot blocks (see Index.deferSlots): marker is the entry
	// count after whose last entry a marker byte was written so that the
	// durable file is not settled while its durable slot table lags its
	// header (0: no marker). The next entries written overwrite it.
	// flushedCount is the header count of the last completed Flush.
	// Both are guarded by ix.mu.
	marker       int32
	flushedCount int32
}

type slotSet struct {
	slot int64
	n    int32
}

// maxCachedSlots bounds the slot table kept in memory (4 bytes a slot).
const maxCachedSlots = 1 << 24

// pendingBatch is how many Puts are collected before writePending.
const pendingBatch = 128

// The cached slot table is written in blocks: block b is the part of the
// slot table in file bytes [b*slotBlockSize, (b+1)*slotBlockSize), so
// block writes cover whole pages (block 0 starts after the header, the last
// ends with the table). Consecutive dirty blocks are written together, up
// to maxSlotWrite bytes at a time.
const (
	slotBlockSize = 4096
	maxSlotWrite  = 256 << 10
)

func fileName(seq int64) string { return fmt.Sprintf("%020d", seq) }

func parseFileName(name string) (int64, bool) {
	if len(name) != 20 {
		return 0, false
	}
	seq, err := strconv.ParseInt(name, 10, 64)
	return seq, err == nil && seq > 0
}

func (f *file) slotPos(slot int64) int64 { return HeaderSize + slot*SlotSize }

func (f *file) entryPos(n int32) int64 {
	return HeaderSize + int64(f.hdr.slotCount)*SlotSize + int64(n-1)*EntrySize
}

func (f *file) full() bool { return f.hdr.entryCount >= f.maxEntries }

func (f *file) slotOf(hash int32) int64 { return int64(hash) % int64(f.hdr.slotCount) }

// readSlot reads a slot into buf (SlotSize bytes; callers that may run
// concurrently pass their own).
func (f *file) readSlot(slot int64, buf []byte) (int32, error) {
	b := buf[:SlotSize]
	if n, err := f.f.ReadAt(b, f.slotPos(slot)); err != nil && err != io.EOF {
		return 0, fmt.Errorf("index: read slot of %s: %w", f.name, err)
	} else if n < SlotSize {
		clear(b[n:]) // past the end of a sparse file: empty
	}
	return int32(binary.BigEndian.Uint32(b)), nil
}

// writeSlot writes a slot (and its cached copy); only the writer (under the
// index lock) calls it.
func (f *file) writeSlot(slot int64, v int32) error {
	b := f.scratch[:SlotSize]
	binary.BigEndian.PutUint32(b, uint32(v))
	if _, err := f.f.WriteAt(b, f.slotPos(slot)); err != nil {
		return fmt.Errorf("index: write slot of %s: %w", f.name, err)
	}
	if f.slots != nil {
		atomic.StoreInt32(&f.slots[slot], v)
	}
	return nil
}

// slot returns the current value of a slot: from the cache, the pending
// updates or the file. buf is as for readSlot.
func (f *file) slot(slot int64, buf []byte) (int32, error) {
	if f.slots != nil {
		return atomic.LoadInt32(&f.slots[slot]), nil
	}
	for i := len(f.pendSlots) - 1; i >= 0; i-- {
		if f.pendSlots[i].slot == slot {
			return f.pendSlots[i].n, nil
		}
	}
	return f.readSlot(slot, buf)
}

// entry returns entry n, from the pending entries or the file.
func (f *file) entry(n int32, buf []byte) (entry, error) {
	if n > f.written && n <= f.hdr.entryCount {
		return decodeEntry(f.pend[int64(n-f.written-1)*EntrySize:]), nil
	}
	return f.readEntry(n, buf)
}

// addPending records entry n = entryCount+1 and its slot update: in the
// cached table (its block marked dirty) or, when the table is not cached,
// in pendSlots.
func (f *file) addPending(n int32, e entry, slot int64) {
	var b [EntrySize]byte
	e.encode(b[:])
	f.pend = append(f.pend, b[:]...)
	if f.slots != nil {
		atomic.StoreInt32(&f.slots[slot], n)
		f.dirtyBlocks.set(f.blockOf(slot))
		return
	}
	f.pendSlots = append(f.pendSlots, slotSet{slot, n})
}

// pendingEntries is the number of entries collected and not yet written.
func (f *file) pendingEntries() int { return len(f.pend) / EntrySize }

// writePending writes the pending entries, then the pending slot updates
// of a file whose table is not cached, to the page cache. The updates of a
// cached table stay marked in dirtyBlocks (see takeDirty). On an error
// they stay pending (writing them again is harmless).
func (f *file) writePending() error {
	if len(f.pend) > 0 {
		if _, err := f.f.WriteAt(f.pend, f.entryPos(f.written+1)); err != nil {
			return fmt.Errorf("index: write entries of %s: %w", f.name, err)
		}
	}
	b := f.scratch[:SlotSize]
	for _, s := range f.pendSlots {
		binary.BigEndian.PutUint32(b, uint32(s.n))
		if _, err := f.f.WriteAt(b, f.slotPos(s.slot)); err != nil {
			return fmt.Errorf("index: write slot of %s: %w", f.name, err)
		}
	}
	if len(f.pend) > 0 {
		f.marker = 0 // the first entry written covers it
	}
	f.written = f.hdr.entryCount
	f.pend, f.pendSlots = f.pend[:0], f.pendSlots[:0]
	return nil
}

// placeMarker writes a byte after the last entry written (all of them:
// writePending ran), so that the file is not settled (longer than its
// header says) however its header and entries reach the disk. ix.mu must
// be held.
func (f *file) placeMarker() error {
	if f.marker == f.written && f.written > 0 {
		return nil
	}
	if _, err := f.f.WriteAt([]byte{0}, f.entryPos(f.written+1)); err != nil {
		return fmt.Errorf("index: write marker of %s: %w", f.name, err)
	}
	f.marker = f.written
	return nil
}

// dropMarker truncates the marker byte away once the slot table is durable
// up to the durable header and nothing was written after the marker. ix.mu
// must be held; the caller syncs.
func (f *file) dropMarker(durableCount int32) (bool, error) {
	if f.marker == 0 || f.marker != f.written || f.marker != durableCount {
		return false, nil
	}
	if err := f.f.Truncate(f.entryPos(f.marker + 1)); err != nil {
		return false, fmt.Errorf("index: truncate the marker of %s: %w", f.name, err)
	}
	f.marker = 0
	return true, nil
}

// setSlots makes slots the cached table (nil: none) with no block dirty.
// ix.mu must be held (or f not shared yet).
func (f *file) setSlots(slots []int32) {
	f.slotWriteMu.Lock()
	defer f.slotWriteMu.Unlock()
	f.slots = slots
	f.dirtyBlocks, f.inflight, f.blockBuf = nil, nil, nil
	if slots != nil {
		n := (f.slotPos(int64(f.hdr.slotCount)) + slotBlockSize - 1) / slotBlockSize
		f.dirtyBlocks, f.inflight = newBitmap(n), newBitmap(n)
	}
}

// blockOf returns the block holding slot.
func (f *file) blockOf(slot int64) int64 { return f.slotPos(slot) / slotBlockSize }

// takeDirty hands the dirty blocks to the next slot block write. The
// caller has just written every pending entry, so each block taken was
// dirtied by an entry already in the page cache that the durable header
// does not count (the crash argument of the package documentation).
// ix.mu must be held.
func (f *file) takeDirty() {
	if f.slots == nil {
		return
	}
	f.slotWriteMu.Lock()
	f.inflight.or(f.dirtyBlocks)
	f.dirtyBlocks.clearAll()
	f.slotWriteMu.Unlock()
}

// writeSlotBlocks writes the blocks taken by takeDirty, encoded from the
// cached table as it is now (values may be newer than the entries written:
// see the package documentation). A block is unmarked once written; after
// an error the rest stay marked for the next writer. It takes slotWriteMu
// and may run without ix.mu (Flush) or with it.
func (f *file) writeSlotBlocks() error {
	f.slotWriteMu.Lock()
	defer f.slotWriteMu.Unlock()
	if f.slots == nil {
		return nil // setSlots(nil) happens only with nothing in flight
	}
	const runBlocks = maxSlotWrite / slotBlockSize
	nb := f.inflight.len()
	for b := int64(0); b < nb; {
		if b%64 == 0 && f.inflight[b/64] == 0 {
			b += 64
			continue
		}
		if !f.inflight.has(b) {
			b++
			continue
		}
		e := b + 1
		for e < nb && e-b < runBlocks && f.inflight.has(e) {
			e++
		}
		if err := f.writeBlockRun(b, e); err != nil {
			return err
		}
		for ; b < e; b++ {
			f.inflight.unset(b)
		}
	}
	return nil
}

// writeBlockRun writes blocks [b, e) of the cached table.
func (f *file) writeBlockRun(b, e int64) error {
	start := max(b*slotBlockSize, HeaderSize)
	end := min(e*slotBlockSize, f.slotPos(int64(f.hdr.slotCount)))
	if f.blockBuf == nil {
		f.blockBuf = make([]byte, maxSlotWrite)
	}
	buf := f.blockBuf[:end-start]
	first := (start - HeaderSize) / SlotSize
	for i := range int64(len(buf) / SlotSize) {
		binary.BigEndian.PutUint32(buf[i*SlotSize:], uint32(atomic.LoadInt32(&f.slots[first+i])))
	}
	if _, err := f.f.WriteAt(buf, start); err != nil {
		return fmt.Errorf("index: write slots of %s: %w", f.name, err)
	}
	return nil
}

// writeAllPending writes the pending entries and every slot update made so
// far, with ix.mu held (roll-over, TruncatePhys).
func (f *file) writeAllPending() error {
	if err := f.writePending(); err != nil {
		return err
	}
	f.takeDirty()
	return f.writeSlotBlocks()
}

// loadSlots reads the slot table into memory, if it is small enough.
func (f *file) loadSlots() error {
	if f.slots != nil || int64(f.hdr.slotCount) > maxCachedSlots {
		return nil
	}
	slots := make([]int32, f.hdr.slotCount)
	err := f.eachSlotChunk(func(first int64, b []byte) error {
		for i := range int64(len(b) / SlotSize) {
			slots[first+i] = int32(binary.BigEndian.Uint32(b[i*SlotSize:]))
		}
		return nil
	})
	if err != nil {
		return err
	}
	f.setSlots(slots)
	return nil
}

// readEntry reads entry n using buf (EntrySize bytes); past the end of the
// file it reads zeros.
func (f *file) readEntry(n int32, buf []byte) (entry, error) {
	b := buf[:EntrySize]
	if k, err := f.f.ReadAt(b, f.entryPos(n)); err != nil && err != io.EOF {
		return entry{}, fmt.Errorf("index: read entry %d of %s: %w", n, f.name, err)
	} else if k < EntrySize {
		clear(b[k:])
	}
	return decodeEntry(b), nil
}

func (f *file) writeHeader(h header) error {
	var b [HeaderSize]byte
	h.encode(b[:])
	if _, err := f.f.WriteAt(b[:], 0); err != nil {
		return fmt.Errorf("index: write header of %s: %w", f.name, err)
	}
	return nil
}

func (f *file) sync() error {
	if err := f.f.Sync(); err != nil {
		return fmt.Errorf("index: fdatasync %s: %w", f.name, err)
	}
	return nil
}

// bitmap is a set of block numbers.
type bitmap []uint64

func newBitmap(n int64) bitmap { return make(bitmap, (n+63)/64) }

func (m bitmap) len() int64       { return int64(len(m)) * 64 }
func (m bitmap) set(i int64)      { m[i/64] |= 1 << (i % 64) }
func (m bitmap) unset(i int64)    { m[i/64] &^= 1 << (i % 64) }
func (m bitmap) has(i int64) bool { return m[i/64]&(1<<(i%64)) != 0 }
func (m bitmap) clearAll()        { clear(m) }

func (m bitmap) count() int64 {
	n := 0
	for _, w := range m {
		n += bits.OnesCount64(w)
	}
	return int64(n)
}

func (m bitmap) or(o bitmap) {
	for i, w := range o {
		m[i] |= w
	}
}
