package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/keelmq/keel/internal/vfs"
)

// ScrubPos is where an index scrub resumes: a file's sequence number and a
// byte position in it. The zero value starts at the first file.
type ScrubPos struct {
	Seq      int64
	At       int64 // byte position in the file (0: its start)
	lastPhys int64 // physOffset of the entry before At
}

// Scrub verifies, a bounded number of bytes at a time, the structure of
// the files no longer taking Puts (their content is final): every slot
// names an entry the file holds, and every entry is plausible (key hash,
// a link to an earlier entry, a time at or after the file's begin), lies
// in the file's physOffset range and does not go below the entry before
// it. It reads from pos at most maxBytes (at least one slot or entry) on
// a descriptor of its own through vfs.ReadCold (the page cache keeps
// nothing it brought in), calls problem for each finding (the file's path,
// the entry number or slot, a message) and returns where to resume, the
// bytes read, and done when every such file was scrubbed. The index is
// not changed.
func (ix *Index) Scrub(pos ScrubPos, maxBytes int64, problem func(path string, at int64, msg string)) (ScrubPos, int64, bool, error) {
	seq, name, h, ok, err := ix.sealedFile(pos.Seq)
	if err != nil || !ok {
		return pos, 0, true, err
	}
	if seq != pos.Seq {
		pos = ScrubPos{Seq: seq}
	}
	f := &file{seq: seq, name: name, hdr: h} // for the layout helpers only
	slotsEnd := f.slotPos(int64(h.slotCount))
	end := f.entryPos(h.entryCount + 1)
	if pos.At < HeaderSize {
		pos.At, pos.lastPhys = HeaderSize, h.beginPhys
	}
	if pos.At >= end {
		return ScrubPos{Seq: f.seq + 1}, 0, false, nil
	}
	unit := int64(EntrySize)
	if pos.At < slotsEnd {
		unit = SlotSize
	}
	limit := slotsEnd
	if pos.At >= slotsEnd {
		limit = end
	}
	n := min(limit-pos.At, max(maxBytes/unit, 1)*unit, 1<<20)
	buf := make([]byte, n)
	cold, err := vfs.OpenCold(ix.cfg.FS, ix.path(f.name))
	if errors.Is(err, os.ErrNotExist) {
		return ScrubPos{Seq: f.seq + 1}, 0, false, nil // removed by retention meanwhile
	}
	if err != nil {
		return pos, 0, false, fmt.Errorf("index: scrub: %w", err)
	}
	_, err = vfs.ReadCold(cold, buf, pos.At)
	cold.Close()
	if err != nil {
		return pos, 0, false, fmt.Errorf("index: scrub %s: %w", f.name, err)
	}
	path := ix.path(f.name)
	if unit == SlotSize {
		for i := int64(0); i < n; i += SlotSize {
			if v := int32(binary.BigEndian.Uint32(buf[i:])); v < 0 || v > h.entryCount {
				problem(path, (pos.At+i-HeaderSize)/SlotSize, fmt.Sprintf("slot names entry %d; the file holds %d", v, h.entryCount))
			}
		}
	} else {
		for i := int64(0); i < n; i += EntrySize {
			num := int32((pos.At+i-slotsEnd)/EntrySize) + 1
			e := decodeEntry(buf[i:])
			switch {
			case !e.plausible(num, h.beginPhys) || e.physOffset > h.endPhys:
				problem(path, int64(num), fmt.Sprintf("entry %d is implausible (hash %d, physOffset %d, time %d s, previous %d; file range [%d, %d])",
					num, e.keyHash, e.physOffset, e.timeDiffS, e.prevIndex, h.beginPhys, h.endPhys))
			case e.physOffset < pos.lastPhys:
				problem(path, int64(num), fmt.Sprintf("entry %d has physOffset %d, below the entry before it (%d)", num, e.physOffset, pos.lastPhys))
			default:
				pos.lastPhys = e.physOffset
			}
		}
	}
	pos.At += n
	return pos, n, false, nil
}

// sealedFile returns the first file from seq on that no longer takes Puts:
// its sequence number, name and header (final for such a file). Scrub reads
// it on its own descriptor without ix.mu, so that a slow cold read never
// holds back Put (the dispatcher) or Query.
func (ix *Index) sealedFile(seq int64) (int64, string, header, bool, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.closed {
		return 0, "", header{}, false, ErrClosed
	}
	for _, c := range ix.files[:max(len(ix.files)-1, 0)] {
		if c.seq >= seq {
			return c.seq, c.name, c.hdr, true, nil
		}
	}
	return 0, "", header{}, false, nil
}
