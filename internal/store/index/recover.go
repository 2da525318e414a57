package index

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
)

// load opens the files of the directory and recovers them.
func (ix *Index) load() error {
	names, err := ix.cfg.FS.List(ix.cfg.Dir)
	if err != nil {
		return fmt.Errorf("index: list: %w", err)
	}
	var files []*file
	for _, name := range names {
		seq, ok := parseFileName(name)
		if !ok {
			ix.log.Warn("index: ignoring unexpected file", "file", ix.path(name))
			continue
		}
		ix.nextSeq = seq + 1
		f, err := ix.openFile(seq)
		if err != nil {
			closeAll(files)
			return err
		}
		if f != nil {
			files = append(files, f)
		}
	}
	// Newest first: when the newest file holds nothing durable and is
	// removed, the one before it takes Puts and is recovered as the newest.
	var kept []*file
	for i := len(files) - 1; i >= 0; i-- {
		f := files[i]
		keep, err := ix.recoverIfNeeded(f, len(kept))
		if err != nil {
			_ = f.f.Close()
			closeAll(files[:i])
			closeAll(kept)
			return err
		}
		if keep {
			if err := f.trustEnds(); err != nil {
				_ = f.f.Close()
				closeAll(files[:i])
				closeAll(kept)
				return err
			}
			f.written, f.flushedCount = f.hdr.entryCount, f.hdr.entryCount
			kept = append(kept, f)
		}
	}
	slices.Reverse(kept)
	ix.files = kept
	if ix.dirGen != ix.dirSync {
		if err := ix.cfg.FS.SyncDir(ix.cfg.Dir); err != nil {
			return fmt.Errorf("index: sync dir: %w", err)
		}
		ix.dirSync = ix.dirGen
	}
	return nil
}

func closeAll(files []*file) {
	for _, f := range files {
		_ = f.f.Close()
	}
}

// openFile opens file seq and reads its header. A file whose header is not
// valid, or that is too short to hold an entry, is removed (its header is
// made durable before any entry is written, so it holds nothing durable)
// and nil is returned.
func (ix *Index) openFile(seq int64) (*file, error) {
	name := fileName(seq)
	vf, err := ix.cfg.FS.OpenFile(ix.path(name), os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("index: open %s: %w", name, err)
	}
	f := &file{seq: seq, name: name, f: vf, maxEntries: int32(ix.cfg.MaxEntries)}
	var b [HeaderSize]byte
	if _, err := vf.ReadAt(b[:], 0); err != nil && err != io.EOF {
		_ = vf.Close()
		return nil, fmt.Errorf("index: read header of %s: %w", name, err)
	}
	f.hdr = decodeHeader(b[:])
	size, err := vf.Size()
	if err != nil {
		_ = vf.Close()
		return nil, fmt.Errorf("index: size of %s: %w", name, err)
	}
	// The begin fields and slotCount are written once, synced before any
	// entry, and never change. A file too short to hold one entry has
	// none.
	if h := f.hdr; h.slotCount > 0 && h.entryCount >= 0 && h.beginPhys >= 0 && h.beginTsMs > 0 &&
		size >= f.entryPos(2) {
		return f, nil
	}
	ix.log.Warn("index: removing file without a valid header or entries", "file", ix.path(name))
	_ = vf.Close()
	if err := ix.cfg.FS.Remove(ix.path(name)); err != nil {
		return nil, fmt.Errorf("index: remove %s: %w", name, err)
	}
	ix.dirGen++
	return nil, nil
}

// recoverIfNeeded checks f; rank is the number of newer files kept (0: f
// takes Puts). It reports whether f keeps entries.
//
// A file is settled when its size is exactly that of the entries its
// header counts: no entry written after its last completed Flush (or
// recovery) reached the disk. A file that is not settled was being written
// when the process stopped; it is recovered and its slot table rebuilt
// from its entries (see rebuildFile). A settled file is also rebuilt when
// a slot points past the entries counted: a Flush writes slot blocks
// encoded after its header's count was taken, so a completed Flush can
// leave such slots durable (and a disk that reorders unsynced writes can
// keep a slot without its entry). Every settled file is checked (its slot
// table read) except a file of exactly MaxEntries entries that is not the
// newest: the Flush that wrote that count took its dirty blocks after the
// file's last Put, so none of its slots can point past the count.
func (ix *Index) recoverIfNeeded(f *file, rank int) (bool, error) {
	size, err := f.f.Size()
	if err != nil {
		return false, fmt.Errorf("index: size of %s: %w", f.name, err)
	}
	settled := f.settled(size)
	if settled && rank > 0 && f.hdr.entryCount == f.maxEntries {
		return true, nil
	}
	count, err := f.lastPlausible(size)
	if err != nil {
		return false, err
	}
	if count == 0 {
		ix.log.Warn("index: removing file without durable entries", "file", ix.path(f.name))
		_ = f.f.Close()
		if err := ix.cfg.FS.Remove(ix.path(f.name)); err != nil {
			return false, fmt.Errorf("index: remove %s: %w", f.name, err)
		}
		ix.dirGen++
		return false, nil
	}
	if settled && count == f.hdr.entryCount {
		if rank == 0 {
			if err := f.loadSlots(); err != nil {
				return false, err
			}
		}
		past, err := f.slotPastCount(count)
		if err != nil {
			return false, err
		}
		if !past {
			return true, nil
		}
	}
	return true, ix.rebuildFile(f, count, size, rank == 0)
}

// settled reports whether the file's size is that of the entries its header
// counts.
func (f *file) settled(size int64) bool {
	return f.hdr.entryCount > 0 && size == f.entryPos(f.hdr.entryCount+1)
}

// lastPlausible returns the highest n <= the header's count (and what the
// file size allows) such that entry n is plausible and its physOffset is not
// below entry n-1's. Entries up to the count of the last completed Flush are
// durable, so this finds that count, or a higher one if the header was torn.
func (f *file) lastPlausible(size int64) (int32, error) {
	capacity := max((size-f.entryPos(1))/EntrySize, 0)
	c := int32(min(int64(f.hdr.entryCount), capacity))
	for ; c > 0; c-- {
		e, err := f.readEntry(c, f.scratch[:])
		if err != nil {
			return 0, err
		}
		if !e.plausible(c, f.hdr.beginPhys) {
			continue
		}
		if c == 1 {
			if e.physOffset == f.hdr.beginPhys {
				break
			}
			continue
		}
		prev, err := f.readEntry(c-1, f.scratch[:])
		if err != nil {
			return 0, err
		}
		if e.physOffset >= prev.physOffset {
			break
		}
	}
	return c, nil
}

// cutFile makes entries 1..count the whole of f, durably: slots pointing
// past count are moved back along their chains, the file is truncated after
// entry count and the header rewritten. size is the current file size.
func (ix *Index) cutFile(f *file, count int32, size int64) error {
	if f.settled(size) {
		if err := f.unsettle(size); err != nil {
			return err
		}
		size++
	}
	if err := f.repairSlots(count, size); err != nil {
		return err
	}
	return ix.finishCut(f, count, size, false)
}

// unsettle makes the durable size of f disagree with its header before
// slots are rewritten in place, by appending a byte: if the process stops
// before finishCut, the next Open finds the file not settled and rebuilds
// its slot table instead of trusting slots a crash may have torn.
func (f *file) unsettle(size int64) error {
	if err := f.f.Truncate(size + 1); err != nil {
		return fmt.Errorf("index: extend %s: %w", f.name, err)
	}
	return f.sync()
}

// finishCut truncates f after entry count, rewrites its header and syncs.
// With unsettled, one byte is left after entry count (a marker, see
// placeMarker) and the file stays dirty: its cached table has blocks to
// write, and the Flush that writes them settles it.
func (ix *Index) finishCut(f *file, count int32, size int64, unsettled bool) error {
	end := f.entryPos(count + 1)
	if unsettled {
		end++
	}
	if size > end || unsettled && size != end {
		if err := f.f.Truncate(end); err != nil {
			return fmt.Errorf("index: truncate %s: %w", f.name, err)
		}
	}
	last, err := f.readEntry(count, f.scratch[:])
	if err != nil {
		return err
	}
	t := f.hdr.beginTsMs + int64(last.timeDiffS)*1000
	if f.hdr.entryCount != count || f.hdr.endTsMs < t || f.hdr.endTsMs > t+999 {
		f.hdr.endTsMs = t
	}
	f.hdr.endPhys = last.physOffset
	f.hdr.entryCount, f.written, f.marker, f.flushedCount = count, count, 0, count
	if unsettled {
		f.marker = count
	}
	if err := f.writeHeader(f.hdr); err != nil {
		return err
	}
	f.dirty = unsettled
	return f.sync()
}

// trustEnds checks the end fields of a file Open keeps against its last
// entry, when that entry is plausible: endPhys becomes its physOffset (the
// highest, as physOffset never decreases within a file), and endTsMs is
// raised to its second if below. A settled file's header is otherwise taken
// as it is, and a damaged endPhys (negative, or past the entries) would
// misreport MaxPhysOffset, from which the store re-indexes, and misplace
// retention. endTsMs is never lowered: an earlier entry may hold a later
// time (the clock stepped back), and Query skips files by it.
func (f *file) trustEnds() error {
	last, err := f.readEntry(f.hdr.entryCount, f.scratch[:])
	if err != nil {
		return err
	}
	if last.plausible(f.hdr.entryCount, f.hdr.beginPhys) {
		f.hdr.endPhys = last.physOffset
		f.hdr.endTsMs = max(f.hdr.endTsMs, f.hdr.beginTsMs+int64(last.timeDiffS)*1000)
	}
	return nil
}

// slotScanChunk is how many slots eachSlotChunk reads at a time.
const slotScanChunk = 16 * 1024

// repairSlots rewrites every slot that points past count (or is negative) to
// the newest entry <= count of its chain, following prevIndex through the
// entries being cut; a chain that cannot be followed is cut at the slot.
func (f *file) repairSlots(count int32, size int64) error {
	entries := int32(min(max((size-f.entryPos(1))/EntrySize, 0), math.MaxInt32))
	return f.eachSlotChunk(func(first int64, b []byte) error {
		for i := range int64(len(b) / SlotSize) {
			v := int32(binary.BigEndian.Uint32(b[i*SlotSize:]))
			if v >= 0 && v <= count {
				continue
			}
			w, err := f.followBack(first+i, v, count, entries)
			if err != nil {
				return err
			}
			if err := f.writeSlot(first+i, w); err != nil {
				return err
			}
		}
		return nil
	})
}

// followBack walks the chain of slot from v until an entry <= count.
func (f *file) followBack(slot int64, v, count, entries int32) (int32, error) {
	for v > count {
		if v > entries {
			return 0, nil
		}
		e, err := f.readEntry(v, f.scratch[:])
		if err != nil {
			return 0, err
		}
		if !e.plausible(v, f.hdr.beginPhys) || f.slotOf(e.keyHash) != slot {
			return 0, nil
		}
		v = e.prevIndex
	}
	return max(v, 0), nil
}
