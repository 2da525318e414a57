package commitlog

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// FuzzRecoveryScan treats the input as the only segment file of a log: the
// scan must not panic, must keep only records with a valid CRC, and a
// recovered log must read back exactly the records the scan accepted. If
// recovery reports corruption in the middle, a repair must succeed and
// leave a log that verifies, still holding those records.
func FuzzRecoveryScan(f *testing.F) {
	f.Add([]byte{})
	var good []byte
	for i := range 5 {
		r := rec(100+i*50, byte(i))
		good = append(good, r...)
		good = be32append(good, Checksum(r))
	}
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add(appendBlank(append([]byte(nil), good...), testSeg-int64(len(good))))
	torn := append([]byte(nil), good...)
	torn[120] ^= 0xff
	f.Add(torn)
	var kinds []byte // one record of each type, then one of a type no release knows
	for i, m := range []int32{record.MagicKafkaBatch, record.MagicAMQP, record.MagicSystem, -626810000} {
		r := typed(120, byte(i), m)
		kinds = be32append(append(kinds, r...), Checksum(r))
	}
	f.Add(kinds)
	holed := appendHole(append([]byte(nil), good[:104]...), 40)
	f.Add(append(holed, good[104:]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > testSeg {
			data = data[:testSeg]
		}
		var kept [][]byte
		var at []int64
		res, err := scanSegment(bytes.NewReader(data), int64(len(data)), testSeg, nil, func(pos int64, r []byte) {
			kept = append(kept, append([]byte(nil), r...))
			at = append(at, pos)
		})
		if errors.Is(err, ErrUnknownType) {
			return // a record of an unknown type with a valid crc stops the scan
		}
		if err != nil {
			t.Fatalf("scan of in-memory data failed: %v", err)
		}
		pos := int64(0)
		for i, r := range kept {
			for _, h := range res.holes {
				if h.pos == pos {
					pos += h.bytes
				}
			}
			if at[i] != pos || Checksum(r) != be32(data[pos+int64(len(r)):]) || !bytes.Equal(r, data[pos:pos+int64(len(r))]) {
				t.Fatalf("kept a record at %d with a bad crc or out of place", at[i])
			}
			pos += int64(len(r)) + TrailerBytes
		}
		if n := len(res.holes); n > 0 && res.holes[n-1].pos == pos {
			pos += res.holes[n-1].bytes
		}
		if pos != res.end || res.end > int64(len(data)) {
			t.Fatalf("end %d, records end at %d", res.end, pos)
		}
		if _, err := findValid(bytes.NewReader(data), 0, int64(len(data)), testSeg); err != nil {
			t.Fatal(err)
		}
		recoverFuzzed(t, data, kept)
		recoverFuzzedWithMark(t, data)
	})
}

// recoverFuzzedWithMark recovers data after a crash with a flushed mark
// three quarters in: Recover never ends the log below the mark (it
// refuses instead, changing nothing) and what it keeps verifies.
func recoverFuzzedWithMark(t *testing.T, data []byte) {
	fs := vfs.NewMem()
	fs.MkdirAll("/c", 0o755)
	f, _ := fs.OpenFile("/c/"+SegmentName(0), os.O_RDWR|os.O_CREATE, 0o644)
	f.WriteAt(data, 0)
	f.Close()
	mark := int64(len(data)) * 3 / 4
	if err := writeMarkFile(fs, "/c", mark); err != nil {
		t.Fatal(err)
	}
	l, err := Open(Config{FS: fs, Dir: "/c", SegmentBytes: testSeg})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	res, err := l.Recover(RecoverOptions{Crashed: true, QuarantineDir: "/q"})
	if err != nil {
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownType) {
			t.Fatal(err)
		}
		if got := segmentOf(t, fs); !bytes.Equal(got, data) {
			t.Fatal("a refusing Recover changed the segment")
		}
		return
	}
	if res.End < mark {
		t.Fatalf("recovered end %d below the flushed mark %d", res.End, mark)
	}
	if _, probs, err := l.Verify(nil); err != nil || len(probs) > 0 {
		t.Fatalf("recovered log does not verify: %v %v", probs, err)
	}
}

func writeMarkFile(fs vfs.FS, dir string, off int64) error {
	f, err := fs.OpenFile(dir+"/"+MarkName, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [markBytes]byte
	encodeMark(&b, off)
	_, err = f.WriteAt(b[:], 0)
	return err
}

func segmentOf(t *testing.T, fs vfs.FS) []byte {
	f, err := fs.OpenFile("/c/"+SegmentName(0), os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, size)
	f.ReadAt(b, 0)
	return b
}

func recoverFuzzed(t *testing.T, data []byte, kept [][]byte) {
	fs := vfs.NewMem()
	fs.MkdirAll("/c", 0o755)
	f, _ := fs.OpenFile("/c/"+SegmentName(0), os.O_RDWR|os.O_CREATE, 0o644)
	f.WriteAt(data, 0)
	f.Close()
	l, err := Open(Config{FS: fs, Dir: "/c", SegmentBytes: testSeg})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Recover(RecoverOptions{}); err != nil {
		if errors.Is(err, ErrUnknownType) {
			return // an unknown type is reported; nothing changed
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatal(err)
		}
		// Corruption in the middle is reported, nothing changed; a
		// repair keeps what the scan kept and leaves a log that verifies.
		l.Close()
		repaired := repairFuzzed(t, fs)
		if repaired == nil {
			return // the repair stopped at a record of an unknown type
		}
		defer repaired.Close()
		readsBack(t, repaired, kept, false)
		return
	}
	readsBack(t, l, kept, true)
}

func repairFuzzed(t *testing.T, fs vfs.FS) *Log {
	l, err := Open(Config{FS: fs, Dir: "/c", SegmentBytes: testSeg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Recover(RecoverOptions{Repair: true, QuarantineDir: "/q"}); err != nil {
		l.Close()
		if errors.Is(err, ErrUnknownType) {
			return nil // reported, never skipped: the repair does not pass it
		}
		t.Fatalf("repair failed: %v", err)
	}
	if _, probs, err := l.Verify(nil); err != nil || len(probs) > 0 {
		t.Fatalf("repaired log does not verify: %v %v", probs, err)
	}
	return l
}

// readsBack checks that l reads back kept first (exactly kept if all).
func readsBack(t *testing.T, l *Log, kept [][]byte, all bool) {
	r := l.NewReader(0)
	for i := 0; ; i++ {
		got, _, err := r.Next(l.WrittenOffset())
		if !all && i == len(kept) {
			return
		}
		if err == io.EOF {
			if i != len(kept) {
				t.Fatalf("recovered log has %d records, scan kept %d", i, len(kept))
			}
			return
		}
		if err != nil {
			t.Fatalf("recovered log does not read back: %v", err)
		}
		if i >= len(kept) || !bytes.Equal(got, kept[i]) {
			t.Fatalf("record %d differs", i)
		}
	}
}

func be32append(b []byte, v uint32) []byte {
	return append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}
