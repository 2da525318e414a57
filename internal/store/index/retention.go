package index

import (
	"fmt"
)

// Flush makes every Put so far durable: for each changed file it syncs the
// entries and slots, then writes the header and syncs again, so a durable
// header never counts entries that are not. New files' directory entries
// are synced too. A failed fdatasync is sticky: later calls return its
// error. A failed write is not (the page cache stays defined): the entries,
// slots and header it did not write are written by the next Flush.
func (ix *Index) Flush() error {
	ix.flushMu.Lock()
	defer ix.flushMu.Unlock()
	return ix.flushLocked(false)
}

type flushJob struct {
	f   *file
	hdr header
	// deferred: the slot blocks were left for a later Flush (deferSlots).
	deferred bool
}

// flushLocked flushes every changed file; final (Close) defers no slot
// block.
func (ix *Index) flushLocked(final bool) error {
	if ix.flushErr != nil {
		return ix.flushErr
	}
	ix.mu.Lock()
	if ix.closed {
		ix.mu.Unlock()
		return ErrClosed
	}
	var jobs []flushJob
	for _, f := range ix.files {
		if !f.dirty {
			continue
		}
		if err := f.writePending(); err != nil {
			ix.mu.Unlock()
			return err
		}
		deferred := !final && ix.deferSlots(f)
		if deferred {
			if err := f.placeMarker(); err != nil {
				ix.mu.Unlock()
				return err
			}
		} else {
			f.takeDirty()
		}
		jobs = append(jobs, flushJob{f, f.hdr, deferred})
	}
	dirGen := ix.dirGen
	dirDirty := dirGen != ix.dirSync || len(ix.parents) > 0
	ix.mu.Unlock()
	for _, j := range jobs {
		// Without ix.mu: Puts continue while the slot blocks (up to the
		// whole table) are encoded and written.
		if err := j.f.writeSlotBlocks(); err != nil {
			return err
		}
		err := j.f.sync()
		if err == nil {
			if werr := j.f.writeHeader(j.hdr); werr != nil {
				// A failed write (a full disk) leaves the page cache
				// defined, unlike a failed fdatasync: the file stays
				// dirty and the next Flush writes the header again.
				return werr
			}
			err = j.f.sync()
		}
		if err != nil {
			ix.flushErr = err
			return err
		}
	}
	if dirDirty {
		for _, d := range append([]string{ix.cfg.Dir}, ix.parents...) {
			if err := ix.cfg.FS.SyncDir(d); err != nil {
				ix.flushErr = fmt.Errorf("index: sync dir %s: %w", d, err)
				return ix.flushErr
			}
		}
		ix.parents = nil
	}
	ix.mu.Lock()
	var settle []*file
	for _, j := range jobs {
		j.f.flushedCount = j.hdr.entryCount
		if j.deferred {
			continue // stays dirty: a later Flush writes the blocks
		}
		if j.f.hdr == j.hdr {
			j.f.dirty = false
		}
		dropped, err := j.f.dropMarker(j.hdr.entryCount)
		if err != nil {
			ix.mu.Unlock()
			return err // the marker stays: the file is only not settled
		}
		if dropped {
			settle = append(settle, j.f)
		}
	}
	ix.dirSync = dirGen
	ix.mu.Unlock()
	for _, f := range settle {
		if err := f.sync(); err != nil {
			ix.flushErr = err
			return err
		}
	}
	return nil
}

// deferSlots reports whether this Flush leaves the changed slot blocks of
// f, the file taking Puts, for a later one. At high rates nearly every
// block of the table changes between two Flushes (a new key lands in a
// random slot), and writing the whole table each time (20 MB at the
// defaults) doubled the bytes the disk had to sync. Blocks are deferred
// while more than the threshold of them changed and entries keep coming;
// the durable file is then kept not settled (placeMarker), so a crash
// rebuilds its slot table from its entries, which are flushed as before.
// A Flush that finds no new entry, a roll-over, TruncatePhys and Close
// write every deferred block, and the file becomes settled again. ix.mu
// must be held.
func (ix *Index) deferSlots(f *file) bool {
	if f.slots == nil || ix.cfg.LazySlotBlocks < 0 || f.hdr.entryCount == f.flushedCount {
		return false
	}
	dirty := f.dirtyBlocks.count()
	if ix.cfg.LazySlotBlocks > 0 {
		return dirty > int64(ix.cfg.LazySlotBlocks)
	}
	blocks := f.blockOf(int64(f.hdr.slotCount)-1) + 1
	return dirty*lazyFraction > blocks
}

// lazyFraction: by default slot blocks are deferred while more than
// 1/lazyFraction of the table's blocks changed since the last Flush.
const lazyFraction = 8

// DeleteBeforePhys removes the files whose every entry points below minPhys
// (endPhysOffset < minPhys), oldest first, except the newest file.
func (ix *Index) DeleteBeforePhys(minPhys int64) error {
	ix.flushMu.Lock()
	defer ix.flushMu.Unlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.closed {
		return ErrClosed
	}
	removed := 0
	for len(ix.files) > 1 && ix.files[0].hdr.endPhys < minPhys {
		if err := ix.removeFile(0); err != nil {
			return err
		}
		removed++
	}
	if removed == 0 {
		return nil
	}
	ix.log.Info("index: removed old files", "count", removed, "min_phys", minPhys)
	return ix.syncDirLocked()
}

// TruncatePhys makes the entries pointing at or past physEnd unreachable,
// durably, after the CommitLog lost its tail: files beginning at or past it
// are removed and the file holding it is cut (its slots are moved back
// along their chains, exactly). Later Puts continue after the cut.
func (ix *Index) TruncatePhys(physEnd int64) error {
	ix.flushMu.Lock()
	defer ix.flushMu.Unlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.closed {
		return ErrClosed
	}
	if n := len(ix.files); n > 0 {
		if err := ix.files[n-1].writeAllPending(); err != nil {
			return err
		}
	}
	removed := false
	for i := len(ix.files) - 1; i >= 0; i-- {
		f := ix.files[i]
		if f.hdr.beginPhys >= physEnd {
			if err := ix.removeFile(i); err != nil {
				return err
			}
			removed = true
			continue
		}
		if f.hdr.endPhys >= physEnd {
			if err := ix.truncateFile(f, physEnd); err != nil {
				return err
			}
		}
		break
	}
	if removed {
		return ix.syncDirLocked()
	}
	return nil
}

// truncateFile cuts f before its first entry at or past physEnd. Entry 1 is
// below physEnd (beginPhys < physEnd) and physOffset never decreases within a
// file, so the cut point is found scanning back from the end.
func (ix *Index) truncateFile(f *file, physEnd int64) error {
	c := f.hdr.entryCount
	for ; c > 1; c-- {
		e, err := f.readEntry(c, f.scratch[:])
		if err != nil {
			return err
		}
		if e.physOffset < physEnd {
			break
		}
	}
	ix.log.Warn("index: truncating entries past the CommitLog end", "file", ix.path(f.name),
		"phys_end", physEnd, "entries", f.hdr.entryCount, "kept", c)
	size, err := f.f.Size()
	if err != nil {
		return fmt.Errorf("index: size of %s: %w", f.name, err)
	}
	// Entries not yet flushed must be durable before slots link past them.
	if err := f.sync(); err != nil {
		return err
	}
	return ix.cutFile(f, c, size)
}

// removeFile closes and deletes ix.files[i]. ix.mu must be held.
func (ix *Index) removeFile(i int) error {
	f := ix.files[i]
	_ = f.f.Close()
	if err := ix.cfg.FS.Remove(ix.path(f.name)); err != nil {
		return fmt.Errorf("index: remove %s: %w", f.name, err)
	}
	ix.files = append(ix.files[:i], ix.files[i+1:]...)
	ix.dirGen++
	return nil
}

func (ix *Index) syncDirLocked() error {
	if err := ix.cfg.FS.SyncDir(ix.cfg.Dir); err != nil {
		return fmt.Errorf("index: sync dir: %w", err)
	}
	ix.dirSync = ix.dirGen
	return nil
}

// Close flushes and closes the index. It is idempotent.
func (ix *Index) Close() error {
	ix.flushMu.Lock()
	defer ix.flushMu.Unlock()
	ix.mu.RLock()
	closed := ix.closed
	ix.mu.RUnlock()
	if closed {
		return nil
	}
	err := ix.flushLocked(true) // writes every deferred slot block
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.closed = true
	ix.closeFiles()
	ix.files = nil
	return err
}
