package index

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"

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
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int32(h & math.MaxInt32)
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
	// are in pend, and the slot updates made with them in pendSlots, in
	// order; writePending hands both to the page cache, entries first.
	written   int32
	pend      []byte
	pendSlots []slotSet
	// slots caches the slot table of the file taking Puts (nil: not
	// cached), so a Put reads no slot from the file.
	slots []int32
}

type slotSet struct {
	slot int64
	n    int32
}

// maxCachedSlots bounds the slot table kept in memory (4 bytes a slot).
const maxCachedSlots = 1 << 24

// pendingBatch is how many Puts are collected before writePending.
const pendingBatch = 128

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
		f.slots[slot] = v
	}
	return nil
}

// slot returns the current value of a slot: from the cache, the pending
// updates or the file. buf is as for readSlot.
func (f *file) slot(slot int64, buf []byte) (int32, error) {
	if f.slots != nil {
		return f.slots[slot], nil
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

// addPending records entry n = entryCount+1 and its slot update.
func (f *file) addPending(n int32, e entry, slot int64) {
	var b [EntrySize]byte
	e.encode(b[:])
	f.pend = append(f.pend, b[:]...)
	f.pendSlots = append(f.pendSlots, slotSet{slot, n})
	if f.slots != nil {
		f.slots[slot] = n
	}
}

// writePending writes the pending entries, then the pending slot updates,
// to the page cache. On an error they stay pending (writing them again is
// harmless).
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
	f.written = f.hdr.entryCount
	f.pend, f.pendSlots = f.pend[:0], f.pendSlots[:0]
	return nil
}

// loadSlots reads the slot table into memory, if it is small enough.
func (f *file) loadSlots() error {
	if f.slots != nil || int64(f.hdr.slotCount) > maxCachedSlots {
		return nil
	}
	slots := make([]int32, f.hdr.slotCount)
	buf := make([]byte, 64<<10)
	for first := 0; first < len(slots); {
		n := min(len(buf)/SlotSize, len(slots)-first)
		b := buf[:n*SlotSize]
		k, err := f.f.ReadAt(b, f.slotPos(int64(first)))
		if err != nil && err != io.EOF {
			return fmt.Errorf("index: read slots of %s: %w", f.name, err)
		}
		clear(b[k:]) // past the end of a sparse file: empty
		for i := range n {
			slots[first+i] = int32(binary.BigEndian.Uint32(b[i*SlotSize:]))
		}
		first += n
	}
	f.slots = slots
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
