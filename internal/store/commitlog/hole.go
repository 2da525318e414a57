package commitlog

import (
	"errors"
	"fmt"
	"io"
)

// A hole record stands where a repair found bytes it could not prove
// intact (see "Repair" in the package documentation). Its magic is its
// fill byte repeated, so a read at any offset inside it that a
// ConsumeQueue or index entry names (the lost records started there)
// sees the magic too and is told the record was lost, not that the log
// is corrupt.
const (
	// MagicHole is the MAGICCODE of a hole record: 0xCBCBCBCB.
	MagicHole int32 = -0x34343435
	// holeFill is every byte of a hole record between its header and its
	// CRC trailer.
	holeFill = 0xCB
	// MinHoleBytes is the smallest hole entry: header and CRC trailer.
	MinHoleBytes = headerBytes + TrailerBytes
)

// ErrHole is wrapped by read errors for an offset inside a hole record: the
// record that was there was lost to corruption and removed by a repair. It
// wraps ErrNoRecord, so readers skip the offset as they skip a removed one.
var ErrHole = fmt.Errorf("commitlog: offset lies in a hole left by a corruption repair: %w", ErrNoRecord)

func init() {
	if u32(MagicHole) != holeFill*0x01010101 {
		panic("commitlog: MagicHole is not its fill byte repeated")
	}
}

// appendHole appends a hole entry of n bytes (CRC trailer included, n >=
// MinHoleBytes) to dst.
func appendHole(dst []byte, n int64) []byte {
	if n < MinHoleBytes {
		panic(fmt.Sprintf("commitlog: hole of %d bytes", n))
	}
	start := len(dst)
	for range n {
		dst = append(dst, holeFill)
	}
	e := dst[start:]
	put32(e[0:4], uint32(n-TrailerBytes))
	put32(e[n-TrailerBytes:], Checksum(e[:n-TrailerBytes]))
	return dst
}

// holeSpan is a valid hole entry found by a scan.
type holeSpan struct {
	pos, bytes int64 // position in the segment file; entry length with its trailer
}

// checkHole verifies the hole entry of total bytes (without trailer) at
// pos: bounds and CRC. It returns why it is invalid, or "".
func checkHole(r io.ReaderAt, total, pos, size, segBytes int64) (string, error) {
	switch {
	case total < headerBytes || pos+total+TrailerBytes+BlankBytes > segBytes:
		return fmt.Sprintf("hole record size %d out of range", total), nil
	case pos+total+TrailerBytes > size:
		return fmt.Sprintf("hole record of %d bytes extends past the end of the file (%d bytes left)", total, size-pos), nil
	}
	ok, err := streamCRCMatches(r, pos, total)
	if err != nil {
		return "", err
	}
	if !ok {
		return "hole record crc mismatch", nil
	}
	return "", nil
}

// IsHole reports whether err says an offset lies in a hole left by a
// repair.
func IsHole(err error) bool { return errors.Is(err, ErrHole) }

// Hole describes a hole record Verify found.
type Hole struct {
	File   string
	Offset int64 // CommitLog offset of the hole record
	Bytes  int64 // bytes it covers, CRC trailer included
}

// repairHole replaces [rel, next) of s, which no valid entry starts in, by
// a hole entry, after a durable copy of those bytes in dir. If no valid
// entry follows in s (next < 0), the segment is closed at rel with a
// blank marker instead and the rest of the file goes to dir. It returns
// the quarantine file.
func (l *Log) repairHole(s *segment, size, rel, next int64, dir string) (string, error) {
	if dir == "" {
		return "", errors.New("commitlog: repair needs a quarantine directory")
	}
	to, entry := size, []byte(nil)
	if next >= 0 {
		to, entry = next, appendHole(nil, next-rel)
	} else {
		entry = appendBlank(nil, l.cfg.SegmentBytes-rel)
	}
	path := ""
	if to > rel { // nothing to copy when the file ends at rel (a segment without its end marker)
		var err error
		if path, err = l.copyOut(s, rel, to, dir, "corrupt"); err != nil {
			return "", err
		}
	}
	l.win.clear() // bytes below the written offset change
	if _, err := s.f.WriteAt(entry, rel); err != nil {
		return "", fmt.Errorf("commitlog: write repair entry to %s: %w", s.path, err)
	}
	if next < 0 {
		if err := s.f.Truncate(rel + BlankBytes); err != nil {
			return "", fmt.Errorf("commitlog: truncate %s: %w", s.path, err)
		}
	}
	if err := s.f.Sync(); err != nil {
		return "", fmt.Errorf("commitlog: fdatasync %s: %w", s.path, err)
	}
	return path, nil
}
