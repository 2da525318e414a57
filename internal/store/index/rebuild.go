package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// rebuildChunk is how many entries rebuildFile reads at a time.
const rebuildChunk = 4096

// rebuildFile makes entries 1..count the whole of f, durably, with a slot
// table and chains derived from the entries alone. It is how a file that
// was being written when the process stopped is recovered: a crash can
// leave a slot half old, half new, pointing at an unrelated entry that
// the header does count, and no check of the slot alone can tell. The
// entries themselves (1..count) are durable, and a slot's value is a
// function of them: the highest entry whose keyHash maps to the slot.
//
// Steps: if the durable file looks settled, unsettle it (a crash during the
// rebuild must lead to another rebuild); walk entries 1..count in order,
// relinking each entry whose prevIndex disagrees with the rebuilt chain of
// its slot (see relink); write the slots that differ from the rebuilt
// table; then truncate, rewrite the header and fdatasync (finishCut).
//
// The file that takes Puts, when its table is cached and slot blocks may be
// deferred (Config.LazySlotBlocks >= 0), does not write its slots here: the
// rebuilt table becomes its cached table with the blocks that differ from
// the file's marked dirty, and finishCut leaves a marker byte, so the file
// stays not settled, like one whose blocks a Flush deferred, until a Flush
// writes them (see deferSlots). After a crash under load nearly every block
// of the live file differs, and writing and syncing the whole table (20 MB
// at the defaults) was most of the time a restart took.
//
// Cost: one sequential read of the file's entries (20 B each) and of its
// slot table (4 B a slot), and memory for the table (4 B a slot, or a map
// of the slots in use for tables larger than maxCachedSlots). It runs only
// for files that were being written, normally the newest one.
func (ix *Index) rebuildFile(f *file, count int32, size int64, takesPuts bool) error {
	if f.settled(size) {
		if err := f.unsettle(size); err != nil {
			return err
		}
		size++
	}
	heads := newSlotTable(f.hdr.slotCount)
	relinked, skipped, err := f.relink(count, heads)
	if err != nil {
		return err
	}
	lazy := takesPuts && heads.dense != nil && ix.cfg.LazySlotBlocks >= 0
	f.setSlots(nil)
	var changed int
	if lazy {
		f.setSlots(heads.dense)
		changed, err = f.markStaleBlocks()
	} else {
		changed, err = f.writeSlotTable(heads)
	}
	if err != nil {
		return err
	}
	later := lazy && changed > 0 // the next Flush writes the changed blocks
	ix.log.Warn("index: rebuilt the slot table of a file that was being written", "file", ix.path(f.name),
		"header_entries", f.hdr.entryCount, "entries", count, "slots_changed", changed,
		"relinked", relinked, "skipped", skipped, "slots_written_later", later)
	if err := ix.finishCut(f, count, size, later); err != nil {
		return err
	}
	if takesPuts && !lazy {
		f.setSlots(heads.dense)
	}
	return nil
}

// markStaleBlocks compares the cached table of f, just rebuilt, with the
// slot table in the file, marks the blocks that differ dirty and returns
// how many slots differ.
func (f *file) markStaleBlocks() (int, error) {
	changed := 0
	err := f.eachSlotChunk(func(first int64, b []byte) error {
		for i := range int64(len(b) / SlotSize) {
			if int32(binary.BigEndian.Uint32(b[i*SlotSize:])) != f.slots[first+i] {
				f.dirtyBlocks.set(f.blockOf(first + i))
				changed++
			}
		}
		return nil
	})
	return changed, err
}

// eachSlotChunk reads the slot table of f a chunk (slotScanChunk slots) at
// a time and calls fn with the chunk's first slot and its bytes (zeros past
// the end of a sparse file), which fn may change. It stops at fn's first
// error and returns it.
func (f *file) eachSlotChunk(fn func(first int64, b []byte) error) error {
	buf := make([]byte, slotScanChunk*SlotSize)
	slots := int64(f.hdr.slotCount)
	for first := int64(0); first < slots; first += slotScanChunk {
		b := buf[:min(slotScanChunk, slots-first)*SlotSize]
		k, err := f.f.ReadAt(b, f.slotPos(first))
		if err != nil && err != io.EOF {
			return fmt.Errorf("index: read slots of %s: %w", f.name, err)
		}
		clear(b[k:])
		if err := fn(first, b); err != nil {
			return err
		}
	}
	return nil
}

// relink walks entries 1..count in order and records in heads, for each
// slot, the newest entry mapping to it. An entry's prevIndex must be the
// slot's head before it; one that is not (a Put linked to a torn slot, a
// chain cut by an earlier recovery, damage at rest) is rewritten to it.
// prevIndex is derived data, so relinking loses nothing, whereas cutting
// the chain there would lose every older entry of the slot. An entry that
// is not plausible (negative hash or time, physOffset below the file's
// begin) is skipped: nothing links to it afterwards.
func (f *file) relink(count int32, heads *slotTable) (relinked, skipped int, err error) {
	buf := make([]byte, rebuildChunk*EntrySize)
	var pb [4]byte
	for first := int64(1); first <= int64(count); first += rebuildChunk {
		k := min(rebuildChunk, int64(count)-first+1)
		b := buf[:k*EntrySize]
		n, err := f.f.ReadAt(b, f.entryPos(int32(first)))
		if err != nil && err != io.EOF {
			return 0, 0, fmt.Errorf("index: read entries of %s: %w", f.name, err)
		}
		clear(b[n:])
		for i := range k {
			num := int32(first + i)
			e := decodeEntry(b[i*EntrySize:])
			if e.keyHash < 0 || e.timeDiffS < 0 || e.physOffset < f.hdr.beginPhys {
				skipped++
				continue
			}
			slot := f.slotOf(e.keyHash)
			if want := heads.get(slot); e.prevIndex != want {
				binary.BigEndian.PutUint32(pb[:], uint32(want))
				if _, err := f.f.WriteAt(pb[:], f.entryPos(num)+entryPrevOff); err != nil {
					return 0, 0, fmt.Errorf("index: relink entry %d of %s: %w", num, f.name, err)
				}
				relinked++
			}
			heads.set(slot, num)
		}
	}
	return relinked, skipped, nil
}

// writeSlotTable writes the slots of f that differ from want, a chunk at a
// time, and returns how many differed.
func (f *file) writeSlotTable(want *slotTable) (int, error) {
	changed := 0
	err := f.eachSlotChunk(func(first int64, b []byte) error {
		diff := 0
		for i := range int64(len(b) / SlotSize) {
			if v := want.get(first + i); int32(binary.BigEndian.Uint32(b[i*SlotSize:])) != v {
				binary.BigEndian.PutUint32(b[i*SlotSize:], uint32(v))
				diff++
			}
		}
		if diff == 0 {
			return nil
		}
		if _, err := f.f.WriteAt(b, f.slotPos(first)); err != nil {
			return fmt.Errorf("index: write slots of %s: %w", f.name, err)
		}
		changed += diff
		return nil
	})
	return changed, err
}

// errSlotPastCount stops slotPastCount's scan at the first bad slot.
var errSlotPastCount = errors.New("slot past count")

// slotPastCount reports whether a slot of f is negative or points past
// entry count: from the cached table if loaded, else reading the file.
func (f *file) slotPastCount(count int32) (bool, error) {
	bad := func(v int32) bool { return v < 0 || v > count }
	if f.slots != nil {
		return slices.ContainsFunc(f.slots, bad), nil
	}
	err := f.eachSlotChunk(func(_ int64, b []byte) error {
		for i := 0; i < len(b); i += SlotSize {
			if bad(int32(binary.BigEndian.Uint32(b[i:]))) {
				return errSlotPastCount
			}
		}
		return nil
	})
	if errors.Is(err, errSlotPastCount) {
		return true, nil
	}
	return false, err
}

// slotTable is a slot table being rebuilt: dense when it may be cached
// (maxCachedSlots), else a map of the slots in use.
type slotTable struct {
	dense  []int32
	sparse map[int64]int32
}

func newSlotTable(slots int32) *slotTable {
	if int64(slots) <= maxCachedSlots {
		return &slotTable{dense: make([]int32, slots)}
	}
	return &slotTable{sparse: map[int64]int32{}}
}

func (t *slotTable) get(slot int64) int32 {
	if t.dense != nil {
		return t.dense[slot]
	}
	return t.sparse[slot]
}

func (t *slotTable) set(slot int64, n int32) {
	if t.dense != nil {
		t.dense[slot] = n
		return
	}
	t.sparse[slot] = n
}
