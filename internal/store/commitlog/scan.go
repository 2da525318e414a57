package commitlog

import (
	"fmt"
	"hash/crc32"
	"io"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/record"
)

// Scanning limits.
const (
	scanChunkBytes   = 1 << 20 // read size of the recovery scanner
	maxWindowedEntry = 8 << 20 // larger entries are CRC-checked streaming first
)

// window serves byte ranges of a file through one reusable buffer.
type window struct {
	r     io.ReaderAt
	size  int64
	buf   []byte
	start int64
	n     int
}

// get returns size n bytes at pos; pos+n must not exceed w.size.
func (w *window) get(pos int64, n int) ([]byte, error) {
	if pos >= w.start && pos+int64(n) <= w.start+int64(w.n) {
		off := pos - w.start
		return w.buf[off : off+int64(n)], nil
	}
	want := int(min(int64(max(n, scanChunkBytes)), w.size-pos))
	if cap(w.buf) < want {
		w.buf = make([]byte, want)
	}
	k := int(min(int64(want), w.size-pos))
	got, err := w.r.ReadAt(w.buf[:k], pos)
	if got < n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		w.n = 0
		return nil, err
	}
	w.start, w.n = pos, got
	return w.buf[:n], nil
}

// segScan is the outcome of scanning one segment file.
type segScan struct {
	end     int64  // position after the last valid entry (or of the blank marker)
	sealed  bool   // a valid blank marker is at end
	invalid string // why the bytes at end are not a valid entry; "" if the file ends at end
	records int
	holes   []holeSpan // valid hole records passed (see hole.go)
}

// scanSegment verifies the entries of one segment file of size bytes
// (segment size segBytes), calling visit for each valid record. It stops at
// the blank marker, the end of the file or the first invalid entry. An I/O
// error is returned as err; invalid data is reported in the result.
func scanSegment(r io.ReaderAt, size, segBytes int64, check func([]byte) error, visit func(pos int64, rec []byte)) (segScan, error) {
	return scanSegmentFrom(r, 0, size, segBytes, check, visit)
}

// scanSegmentFrom is scanSegment starting at position from, which the
// caller knows to be the start of an entry.
func scanSegmentFrom(r io.ReaderAt, from, size, segBytes int64, check func([]byte) error, visit func(pos int64, rec []byte)) (segScan, error) {
	w := &window{r: r, size: size}
	var res segScan
	pos := from
	for {
		res.end = pos
		if pos == size {
			return res, nil
		}
		if size-pos < headerBytes {
			res.invalid = fmt.Sprintf("%d trailing bytes, shorter than an entry header", size-pos)
			return res, nil
		}
		h, err := w.get(pos, headerBytes)
		if err != nil {
			return res, err
		}
		total, magic := int64(int32(be32(h[0:4]))), int32(be32(h[4:8]))
		if magic == message.MagicBlank {
			if total != segBytes-pos {
				res.invalid = fmt.Sprintf("blank marker of size %d does not reach the segment end (%d bytes left)", total, segBytes-pos)
			} else {
				res.sealed = true
			}
			return res, nil
		}
		if magic == MagicHole {
			reason, err := checkHole(r, total, pos, size, segBytes)
			if err != nil {
				return res, err
			}
			if reason != "" {
				res.invalid = reason
				return res, nil
			}
			res.holes = append(res.holes, holeSpan{pos: pos, bytes: total + TrailerBytes})
			pos += total + TrailerBytes
			continue
		}
		if reason := checkEntryBounds(magic, total, pos, size, segBytes); reason != "" {
			if err := unknownTypeAt(r, magic, total, pos, size, segBytes); err != nil {
				return res, err
			}
			res.invalid = reason
			return res, nil
		}
		rec, reason, err := readVerified(w, pos, total, check)
		if err != nil {
			return res, err
		}
		if reason != "" {
			res.invalid = reason
			return res, nil
		}
		if visit != nil {
			visit(pos, rec)
		}
		res.records++
		pos += total + TrailerBytes
	}
}

func checkEntryBounds(magic int32, total, pos, size, segBytes int64) string {
	switch {
	case record.TypeOfMagic(magic) == record.Unknown:
		return fmt.Sprintf("bad magic %#08x", u32(magic))
	default:
		return checkSizeBounds(total, pos, size, segBytes)
	}
}

// unknownTypeAt returns an error wrapping ErrUnknownType if the entry at
// pos has a magic of no known type but is otherwise a valid entry (its
// checksum matches): a record of a type this version does not know, which
// must stop the scan, never be taken for garbage and cut.
func unknownTypeAt(r io.ReaderAt, magic int32, total, pos, size, segBytes int64) error {
	if record.TypeOfMagic(magic) != record.Unknown || checkSizeBounds(total, pos, size, segBytes) != "" {
		return nil
	}
	ok, err := streamCRCMatches(r, pos, total)
	if err != nil || !ok {
		return err
	}
	return fmt.Errorf("commitlog: record at segment position %d: %w", pos, record.UnknownMagicError(magic))
}

func checkSizeBounds(total, pos, size, segBytes int64) string {
	switch {
	case total < headerBytes || pos+total+TrailerBytes+BlankBytes > segBytes:
		return fmt.Sprintf("record size %d out of range", total)
	case pos+total+TrailerBytes > size:
		return fmt.Sprintf("record of %d bytes extends past the end of the file (%d bytes left)", total, size-pos)
	}
	return ""
}

// readVerified reads the entry of total record bytes at pos and verifies it.
// It returns the record, or a reason why it is invalid.
func readVerified(w *window, pos, total int64, check func([]byte) error) ([]byte, string, error) {
	n := total + TrailerBytes
	if n > maxWindowedEntry {
		ok, err := streamCRCMatches(w.r, pos, total)
		if err != nil {
			return nil, "", err
		}
		if !ok {
			return nil, "crc mismatch", nil
		}
	}
	e, err := w.get(pos, int(n))
	if err != nil {
		return nil, "", err
	}
	if err := verifyEntry(e, pos, int32(total), check); err != nil {
		return nil, err.Error(), nil
	}
	return e[:total], "", nil
}

// streamCRCMatches checks the CRC of the entry at pos without holding it in
// memory.
func streamCRCMatches(r io.ReaderAt, pos, total int64) (bool, error) {
	buf := make([]byte, min(scanChunkBytes, total))
	var crc uint32
	for done := int64(0); done < total; {
		k := min(int64(len(buf)), total-done)
		if _, err := r.ReadAt(buf[:k], pos+done); err != nil {
			return false, err
		}
		crc = crc32.Update(crc, crcTable, buf[:k])
		done += k
	}
	var t [TrailerBytes]byte
	if _, err := r.ReadAt(t[:], pos+total); err != nil {
		return false, err
	}
	return crc == be32(t[:]), nil
}

// findValid returns the first position q >= from of the file (of size
// bytes, in a segment of segBytes) where a valid entry or a valid blank
// marker starts, or -1.
func findValid(r io.ReaderAt, from, size, segBytes int64) (int64, error) {
	buf := make([]byte, min(scanChunkBytes, max(size-from, 0)))
	for start := from; start+headerBytes <= size; {
		k := min(int64(len(buf)), size-start)
		if _, err := r.ReadAt(buf[:k], start); err != nil && err != io.EOF {
			return -1, err
		}
		for i := int64(0); i+headerBytes <= k; i++ {
			if b := buf[i+4]; b != 0xDA && b != 0xCB {
				continue
			}
			if int32(be32(buf[i:])) < headerBytes {
				continue // no entry, blank marker or hole is that short (the fill of a hole, say)
			}
			ok, err := validAt(r, start+i, size, segBytes)
			if err != nil {
				return -1, err
			}
			if ok {
				return start + i, nil
			}
		}
		start += k - headerBytes + 1
	}
	return -1, nil
}

func validAt(r io.ReaderAt, q, size, segBytes int64) (bool, error) {
	var h [headerBytes]byte
	if _, err := r.ReadAt(h[:], q); err != nil {
		return false, err
	}
	total, magic := int64(int32(be32(h[0:4]))), int32(be32(h[4:8]))
	if magic == message.MagicBlank {
		return total == segBytes-q, nil
	}
	if magic == MagicHole {
		reason, err := checkHole(r, total, q, size, segBytes)
		return reason == "", err
	}
	// A record of an unknown type counts as valid here: what comes before
	// it is then corruption in the middle, never a torn tail to cut with
	// it (the scan stops at it with ErrUnknownType).
	if checkSizeBounds(total, q, size, segBytes) != "" {
		return false, nil
	}
	return streamCRCMatches(r, q, total)
}
