package consumequeue

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/keelmq/keel/internal/vfs"
)

// EntrySize is the size of one entry on disk.
const EntrySize = 20

// Entry locates one message of the queue in the CommitLog.
type Entry struct {
	PhysOffset int64 // CommitLog offset of the record's first byte
	Size       int32 // record size (TOTALSIZE, without the CRC trailer)
	TagsCode   int64 // hash of the TAGS property, for server-side filtering
}

// filler occupies the slots before the first real entry of a queue that was
// started at an offset inside a segment (see Append). It never leaves the
// package.
var filler = Entry{PhysOffset: 0, Size: math.MaxInt32, TagsCode: 0}

func (e Entry) isFiller() bool { return e == filler }

// valid reports whether e can be a stored entry (a filler is valid).
func (e Entry) valid() bool { return e.Size > 0 && e.PhysOffset >= 0 }

func putEntry(b []byte, e Entry) {
	_ = b[EntrySize-1]
	binary.BigEndian.PutUint64(b[0:8], uint64(e.PhysOffset))
	binary.BigEndian.PutUint32(b[8:12], uint32(e.Size))
	binary.BigEndian.PutUint64(b[12:20], uint64(e.TagsCode))
}

func getEntry(b []byte) Entry {
	_ = b[EntrySize-1]
	return Entry{
		PhysOffset: int64(binary.BigEndian.Uint64(b[0:8])),
		Size:       int32(binary.BigEndian.Uint32(b[8:12])),
		TagsCode:   int64(binary.BigEndian.Uint64(b[12:20])),
	}
}

// segment is one file of EntriesPerSegment slots starting at queue offset
// base.
type segment struct {
	base   int64 // queue offset of the first slot
	name   string
	f      vfs.File
	count  int64 // entries appended (the newest may still be in Queue.pend)
	synced int64 // entries covered by a completed fdatasync
}

// segmentName returns the file name of the segment starting at base: the
// byte offset of its first entry in the whole queue, 20 digits.
func segmentName(base int64) string { return fmt.Sprintf("%020d", base*EntrySize) }

// parseSegmentName returns the base queue offset named by name.
func parseSegmentName(name string) (int64, bool) {
	if len(name) != 20 {
		return 0, false
	}
	off, err := strconv.ParseInt(name, 10, 64)
	if err != nil || off < 0 || off%EntrySize != 0 {
		return 0, false
	}
	return off / EntrySize, true
}
