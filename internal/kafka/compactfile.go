package kafka

// The compacted copy of a partition: one file holding the surviving
// record batches of the partition below its cleaned point, at their
// original offsets (compact.go says how it is made and read). Layout,
// big-endian:
//
//	header (64 bytes)
//	  0  4 magic "KCC1"
//	  4  2 version = 1
//	  6  2 reserved (0)
//	  8  8 from     the partition's log start as the copy sees it
//	 16  8 cleaned  the first Kafka offset the copy does not cover:
//	                offsets below it are read from the copy, the others
//	                from the store
//	 24  4 frames   the number of frames that follow
//	 28  4 reserved (0)
//	 32  8 body     the bytes of the frames
//	 40  8 anchor   an offset of the partition when the copy began (its
//	                log start then) ...
//	 48  8 anchorPhys ... and the CommitLog offset of its record: while
//	                the store has that entry it must locate that record,
//	                else the copy is another topic's of the same name
//	 56  4 CRC-32C of bytes 0-55
//	 60  4 reserved (0)
//	frames, in offset order, each:
//	  0  4 batchLen   the bytes of the batch
//	  4  8 horizonMs  a tombstone in the batch is removed by the first
//	                  cleaning at or after this time (-1: none holds one)
//	 12  4 CRC-32C of bytes 0-11 and of the batch
//	 16  . batch      a RecordBatch v2 whose baseOffset, lastOffsetDelta
//	                  and records' offset deltas are the original ones
//	                  (the records cleaned away leave gaps)
//
// A copy is written whole under a temporary name, fdatasynced, renamed to
// its generation's name and the directory synced; only then is the
// generation before it removed. Open takes the highest generation of a
// partition that is there (a rename is durable only with its directory
// sync; the file behind either name is complete, synced before it was
// renamed) and verifies every byte of it; temporary files are removed.

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/vfs"
)

const (
	copyMagic       = 0x4B434331 // "KCC1"
	copyVersion     = 1
	copyHeaderBytes = 64
	frameHeaderSize = 16
	copySuffix      = ".kcc"
	tmpSuffix       = ".tmp"
)

// errCopyCorrupt says a compacted copy failed verification.
var errCopyCorrupt = errors.New("kafka: compacted copy corrupt")

// copyFrame locates one batch of a copy.
type copyFrame struct {
	base, last int64 // the batch's first and last offsets (baseOffset, + lastOffsetDelta)
	pos        int64 // the frame's position in the file
	size       int32 // the batch's bytes
	maxTs      int64 // the batch's maxTimestamp
	horizon    int64 // tombstones go at or after this (-1: none)
}

// compactCopy is one generation of a partition's copy, open for reading.
type compactCopy struct {
	gen        uint64
	path       string
	f          vfs.File
	from       int64
	cleaned    int64
	anchor     int64 // the partition's offset whose record is at anchorPhys
	anchorPhys int64
	frames     []copyFrame
	bytes      int64 // the frames' bytes
}

// copyName is the file name of generation gen of partition k's copy (the
// topic hex-encoded: any topic name makes one file name).
func copyName(k queueKey, gen uint64) string {
	return hex.EncodeToString([]byte(k.topic)) + "." + strconv.Itoa(int(k.queueID)) + "." + fmt.Sprintf("%016x", gen) + copySuffix
}

// parseCopyName is copyName's inverse.
func parseCopyName(name string) (queueKey, uint64, bool) {
	base, ok := strings.CutSuffix(name, copySuffix)
	if !ok {
		return queueKey{}, 0, false
	}
	parts := strings.Split(base, ".")
	if len(parts) != 3 {
		return queueKey{}, 0, false
	}
	topic, err1 := hex.DecodeString(parts[0])
	q, err2 := strconv.ParseInt(parts[1], 10, 32)
	gen, err3 := strconv.ParseUint(parts[2], 16, 64)
	if err1 != nil || err2 != nil || err3 != nil || len(topic) == 0 {
		return queueKey{}, 0, false
	}
	return queueKey{string(topic), int32(q)}, gen, true
}

// findCopies lists the copies in dir: the highest generation of each
// partition, and every other file (older generations, temporary files)
// to remove.
func findCopies(fs vfs.FS, dir string) (latest map[queueKey]uint64, stale []string, err error) {
	names, err := fs.List(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return map[queueKey]uint64{}, nil, nil
		}
		return nil, nil, fmt.Errorf("kafka: list compacted copies: %w", err)
	}
	latest = map[queueKey]uint64{}
	for _, n := range names {
		k, gen, ok := parseCopyName(n)
		if !ok {
			stale = append(stale, n) // temporary files, and nothing else is written here
			continue
		}
		if g, seen := latest[k]; seen {
			stale = append(stale, copyName(k, min(g, gen)))
		}
		latest[k] = max(latest[k], gen)
	}
	sort.Strings(stale)
	return latest, stale, nil
}

// openCopy opens and verifies a copy.
func openCopy(fs vfs.FS, dir string, k queueKey, gen uint64) (*compactCopy, error) {
	p := path.Join(dir, copyName(k, gen))
	f, err := fs.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("kafka: open compacted copy: %w", err)
	}
	c, err := readCopy(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	c.gen, c.path = gen, p
	return c, nil
}

// readCopy verifies a whole copy and indexes its frames.
func readCopy(f vfs.File) (*compactCopy, error) {
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	var h [copyHeaderBytes]byte
	if size < copyHeaderBytes {
		return nil, fmt.Errorf("%w: %d bytes, the header is %d", errCopyCorrupt, size, copyHeaderBytes)
	}
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return nil, err
	}
	be := binary.BigEndian
	switch {
	case be.Uint32(h[0:]) != copyMagic || be.Uint16(h[4:]) != copyVersion:
		return nil, fmt.Errorf("%w: magic %#x version %d", errCopyCorrupt, be.Uint32(h[0:]), be.Uint16(h[4:]))
	case crc32.Checksum(h[:56], castagnoli) != be.Uint32(h[56:]):
		return nil, fmt.Errorf("%w: header CRC", errCopyCorrupt)
	}
	c := &compactCopy{f: f, from: int64(be.Uint64(h[8:])), cleaned: int64(be.Uint64(h[16:])), bytes: int64(be.Uint64(h[32:])),
		anchor: int64(be.Uint64(h[40:])), anchorPhys: int64(be.Uint64(h[48:]))}
	n := int(be.Uint32(h[24:]))
	if size != copyHeaderBytes+c.bytes || c.from > c.cleaned || int64(n) > c.bytes/(frameHeaderSize+batchHeaderBytes) {
		return nil, fmt.Errorf("%w: %d bytes for a body of %d in %d frames, offsets %d-%d", errCopyCorrupt, size, c.bytes, n, c.from, c.cleaned)
	}
	c.frames = make([]copyFrame, 0, n)
	pos, prevLast := int64(copyHeaderBytes), c.from-1
	var buf []byte
	for i := 0; i < n; i++ {
		fr, b, err := readCopyFrame(f, pos, size, buf)
		if err != nil {
			return nil, fmt.Errorf("frame %d at %d: %w", i, pos, err)
		}
		buf = b
		if fr.base <= prevLast || fr.last >= c.cleaned {
			return nil, fmt.Errorf("%w: frame %d at offsets %d-%d after %d, cleaned point %d", errCopyCorrupt, i, fr.base, fr.last, prevLast, c.cleaned)
		}
		c.frames = append(c.frames, fr)
		prevLast, pos = fr.last, pos+frameHeaderSize+int64(fr.size)
	}
	if pos != size {
		return nil, fmt.Errorf("%w: %d bytes after the last frame", errCopyCorrupt, size-pos)
	}
	return c, nil
}

// readCopyFrame reads and verifies the frame at pos (the file is size bytes);
// buf is reused for the batch.
func readCopyFrame(f vfs.File, pos, size int64, buf []byte) (copyFrame, []byte, error) {
	var h [frameHeaderSize]byte
	if pos+frameHeaderSize > size {
		return copyFrame{}, buf, fmt.Errorf("%w: frame header past the end", errCopyCorrupt)
	}
	if _, err := f.ReadAt(h[:], pos); err != nil {
		return copyFrame{}, buf, err
	}
	be := binary.BigEndian
	n := int64(be.Uint32(h[0:]))
	if n < batchHeaderBytes || pos+frameHeaderSize+n > size {
		return copyFrame{}, buf, fmt.Errorf("%w: batch of %d bytes", errCopyCorrupt, n)
	}
	buf = append(buf[:0], make([]byte, n)...)
	if _, err := f.ReadAt(buf, pos+frameHeaderSize); err != nil {
		return copyFrame{}, buf, err
	}
	crc := crc32.Update(crc32.Checksum(h[:12], castagnoli), castagnoli, buf)
	if crc != be.Uint32(h[12:]) {
		return copyFrame{}, buf, fmt.Errorf("%w: frame CRC", errCopyCorrupt)
	}
	bh, err := parseBatchHeader(buf)
	if err != nil {
		return copyFrame{}, buf, fmt.Errorf("%w: %v", errCopyCorrupt, err)
	}
	return copyFrame{base: bh.baseOffset, last: bh.baseOffset + int64(bh.lastOffsetDelta), pos: pos, size: int32(n),
		maxTs: int64(be.Uint64(buf[35:])), horizon: int64(be.Uint64(h[4:]))}, buf, nil
}

// batch reads the batch of frame i into buf.
func (c *compactCopy) batch(i int, buf []byte) ([]byte, error) {
	fr := c.frames[i]
	buf = append(buf[:0], make([]byte, fr.size)...)
	if _, err := c.f.ReadAt(buf, fr.pos+frameHeaderSize); err != nil {
		return buf, fmt.Errorf("kafka: read compacted copy %s: %w", c.path, err)
	}
	// The frame was verified at open; a batch read back must still be
	// the one written (the batch's own CRC covers all but its offsets).
	if crc32.Checksum(buf[21:], castagnoli) != binary.BigEndian.Uint32(buf[17:]) ||
		int64(binary.BigEndian.Uint64(buf)) != fr.base {
		return buf, fmt.Errorf("%w: %s: batch at %d reads back changed", errCopyCorrupt, c.path, fr.pos)
	}
	return buf, nil
}

// copyWriter writes a new generation of a copy under a temporary name.
type copyWriter struct {
	fs     vfs.FS
	dir    string
	k      queueKey
	gen    uint64
	tmp    string
	f      vfs.File
	pos    int64
	buf    []byte // frames not yet written
	frames []copyFrame
	body   int64
}

// maxWriteBuffer is the bytes of frames a copyWriter gathers before it
// writes them.
var maxWriteBuffer = 1 << 20 // a variable for tests

func newCopyWriter(fs vfs.FS, dir string, k queueKey, gen uint64) (*copyWriter, error) {
	w := &copyWriter{fs: fs, dir: dir, k: k, gen: gen, tmp: path.Join(dir, copyName(k, gen)+tmpSuffix), pos: copyHeaderBytes}
	f, err := fs.OpenFile(w.tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kafka: create compacted copy: %w", err)
	}
	w.f = f
	return w, nil
}

// add appends one batch (whole, its CRC valid) with the tombstone horizon.
func (w *copyWriter) add(batch []byte, horizon int64) error {
	var h [frameHeaderSize]byte
	be := binary.BigEndian
	be.PutUint32(h[0:], uint32(len(batch)))
	be.PutUint64(h[4:], uint64(horizon))
	be.PutUint32(h[12:], crc32.Update(crc32.Checksum(h[:12], castagnoli), castagnoli, batch))
	base := int64(be.Uint64(batch))
	w.frames = append(w.frames, copyFrame{base: base, last: base + int64(int32(be.Uint32(batch[23:]))),
		pos: w.pos + int64(len(w.buf)), size: int32(len(batch)), maxTs: int64(be.Uint64(batch[35:])), horizon: horizon})
	w.buf = append(append(w.buf, h[:]...), batch...)
	w.body += int64(frameHeaderSize + len(batch))
	if len(w.buf) >= maxWriteBuffer {
		return w.flush()
	}
	return nil
}

func (w *copyWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.f.WriteAt(w.buf, w.pos); err != nil {
		return fmt.Errorf("kafka: write compacted copy: %w", err)
	}
	w.pos += int64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

// finish writes the header, syncs the file, renames it to its
// generation's name and syncs the directory: from then on it is the
// partition's copy, also after a crash. It returns the copy open for
// reading.
func (w *copyWriter) finish(from, cleaned, anchor, anchorPhys int64) (*compactCopy, error) {
	if err := w.flush(); err != nil {
		return nil, err
	}
	var h [copyHeaderBytes]byte
	be := binary.BigEndian
	be.PutUint32(h[0:], copyMagic)
	be.PutUint16(h[4:], copyVersion)
	be.PutUint64(h[8:], uint64(from))
	be.PutUint64(h[16:], uint64(cleaned))
	be.PutUint32(h[24:], uint32(len(w.frames)))
	be.PutUint64(h[32:], uint64(w.body))
	be.PutUint64(h[40:], uint64(anchor))
	be.PutUint64(h[48:], uint64(anchorPhys))
	be.PutUint32(h[56:], crc32.Checksum(h[:56], castagnoli))
	if _, err := w.f.WriteAt(h[:], 0); err != nil {
		return nil, fmt.Errorf("kafka: write compacted copy: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return nil, fmt.Errorf("kafka: sync compacted copy: %w", err)
	}
	final := path.Join(w.dir, copyName(w.k, w.gen))
	if err := w.fs.Rename(w.tmp, final); err != nil {
		return nil, fmt.Errorf("kafka: rename compacted copy: %w", err)
	}
	if err := w.fs.SyncDir(w.dir); err != nil {
		return nil, fmt.Errorf("kafka: sync compacted copies' directory: %w", err)
	}
	c := &compactCopy{gen: w.gen, path: final, f: w.f, from: from, cleaned: cleaned, anchor: anchor, anchorPhys: anchorPhys,
		frames: w.frames, bytes: w.body}
	w.f = nil
	return c, nil
}

// abort closes and removes the temporary file.
func (w *copyWriter) abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
		w.fs.Remove(w.tmp)
	}
}
