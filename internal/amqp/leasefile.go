package amqp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/vfs"
)

// The delivery lease file (DataDir/amqp/lease-<topic>, queue.go). A busy
// queue raises its lease hundreds of times a second; writing the file anew
// each time (a new file, its fdatasync, a rename and a directory sync)
// cost more CPU than the deliveries it covers. So the file is written
// once, whole, and then overwritten in place, a slot at a time, each
// write followed by one fdatasync:
//
//	offset  0  slot 0 (32 bytes)
//	offset 32  slot 1 (32 bytes)
//
//	slot:  magic "KLS1" (4) | sequence (8) | lease (8) | CRC32-C of the 20 bytes before (4) | zero (8)
//
// Write n (sequence n) goes to slot n%2, so it never overwrites the slot
// of write n-1: a write torn by a crash leaves a slot whose CRC fails, and
// the other slot holds the lease as it was before that write, which was
// durable before any delivery could need the new one. The lease is the
// value of the valid slot with the highest sequence.
//
// The file of an earlier release (and the one a master serving slaves
// writes, whose Mirror writes the file from the log's lease records as
// well: replicate.go) holds the lease as decimal text, written whole with
// vfs.WriteFileDurable; readLease reads both. (An earlier release reads
// only the text: it refuses to open a data directory whose lease files
// are in slots.)

const (
	leaseSlotBytes = 32
	leaseFileBytes = 2 * leaseSlotBytes
	leaseMagic     = "KLS1"
)

var leaseCRC = crc32.MakeTable(crc32.Castagnoli)

// leaseFile is a queue's lease file open for writes in place (guarded by
// the queue's leaseMu); f nil: not open (the next write writes it whole).
type leaseFile struct {
	f   vfs.File
	seq uint64 // the sequence of the last slot written
}

// appendLeaseSlot appends the slot of sequence seq holding lease.
func appendLeaseSlot(b []byte, seq uint64, lease int64) []byte {
	at := len(b)
	b = append(b, leaseMagic...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, uint64(lease))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b[at:], leaseCRC))
	return append(b, make([]byte, leaseSlotBytes-(len(b)-at))...)
}

// write makes lease the file's value, durably. A failure closes the file:
// after it the page cache cannot be trusted, and the next write writes
// the file whole again.
func (lf *leaseFile) write(fsys vfs.FS, path string, lease int64) error {
	if lf.f == nil {
		// Sequence 1, in slot 1 (as every write, in slot seq%2); slot
		// 0 is empty until write 2.
		b := appendLeaseSlot(make([]byte, leaseSlotBytes), 1, lease)
		if err := vfs.WriteFileDurable(fsys, path, b, 0o644); err != nil {
			return err
		}
		f, err := fsys.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", path, err)
		}
		lf.f, lf.seq = f, 1
		return nil
	}
	seq := lf.seq + 1
	var slot [leaseSlotBytes]byte
	_, err := lf.f.WriteAt(appendLeaseSlot(slot[:0], seq, lease), int64(seq%2)*leaseSlotBytes)
	if err == nil {
		err = lf.f.Sync()
	}
	if err != nil {
		lf.close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	lf.seq = seq
	return nil
}

// close closes the file if it is open.
func (lf *leaseFile) close() {
	if lf.f != nil {
		lf.f.Close()
		lf.f = nil
	}
}

// readLease returns a queue's lease (0 if it has none).
func readLease(fsys vfs.FS, path string) (int64, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("amqp: %w", err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return 0, fmt.Errorf("amqp: %s: %w", path, err)
	}
	if size > 64<<10 {
		return 0, fmt.Errorf("amqp: %s: %d bytes is not a lease", path, size)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("amqp: read %s: %w", path, err)
	}
	if len(b) != leaseFileBytes {
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64) // decimal text
		if err != nil {
			return 0, fmt.Errorf("amqp: %s: %w", path, err)
		}
		return v, nil
	}
	v, ok := leaseOfSlots(b)
	if !ok {
		return 0, fmt.Errorf("amqp: %s: neither lease slot is valid", path)
	}
	return v, nil
}

// leaseOfSlots returns the lease of the valid slot with the highest
// sequence in a file in slots; ok false if neither is valid.
func leaseOfSlots(b []byte) (lease int64, ok bool) {
	var best uint64
	for i := range 2 {
		s := b[i*leaseSlotBytes : (i+1)*leaseSlotBytes]
		if string(s[:4]) != leaseMagic || binary.BigEndian.Uint32(s[20:]) != crc32.Checksum(s[:20], leaseCRC) {
			continue
		}
		if seq := binary.BigEndian.Uint64(s[4:]); !ok || seq > best {
			best, lease, ok = seq, int64(binary.BigEndian.Uint64(s[12:])), true
		}
	}
	return lease, ok
}
