package commitlog

import (
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// segmentSize returns the size of the segment file starting at base.
func segmentSize(t *testing.T, fs vfs.FS, base int64) int64 {
	t.Helper()
	f, err := fs.OpenFile("/data/commitlog/"+SegmentName(base), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readAllRecords reads every record of the log with a Reader.
func readAllRecords(t *testing.T, l *Log) []int64 {
	t.Helper()
	var offs []int64
	r := l.NewReader(0)
	for {
		_, phys, err := r.Next(l.WrittenOffset())
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("reader at %d: %v", r.Offset(), err)
			}
			return offs
		}
		offs = append(offs, phys)
	}
}

func TestNoSpaceLeavesLogUsable(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	l, _ := openLog(t, efs, RecoverOptions{})
	defer l.Close()
	first := appendAll(t, l, rec(100, 1))
	efs.SetFreeBytes(50)
	patched := 0
	_, err := l.Append([][]byte{rec(100, 2), rec(100, 3)}, func(int, []byte, int64) { patched++ })
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrFailed) {
		t.Fatalf("append on a full disk: %v", err)
	}
	if patched != 2 {
		t.Fatalf("patch called %d times, want 2 (the caller undoes what it assigned)", patched)
	}
	if l.Err() != nil || l.WrittenOffset() != 104 {
		t.Fatalf("after ENOSPC: err %v, written %d (want nil, 104)", l.Err(), l.WrittenOffset())
	}
	if err := l.Flush(); err != nil {
		t.Fatalf("flush after ENOSPC: %v", err)
	}
	checkReadable(t, l, first)

	efs.SetFreeBytes(-1)
	second := appendAll(t, l, rec(100, 2), rec(100, 3))
	if second[0].phys != 104 {
		t.Fatalf("retried batch at %d, want 104", second[0].phys)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	checkReadable(t, l, append(first, second...))
}

// A short write that ran out of space may leave whole records of the
// failed batch in the file: they are cut, so neither the next append nor
// recovery can see them.
func TestNoSpaceShortWriteIsCut(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	l, _ := openLog(t, efs, RecoverOptions{})
	first := appendAll(t, l, rec(100, 1))
	efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: "commitlog", Times: 1, Err: syscall.ENOSPC, ShortWrite: 2*304 + 10})
	_, err := l.Append([][]byte{rec(300, 2), rec(300, 3), rec(300, 4)}, nil)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("short write on a full disk: %v", err)
	}
	if n := segmentSize(t, mem, 0); n != 104 {
		t.Fatalf("segment is %d bytes after the failed write, want 104 (cut back)", n)
	}
	second := appendAll(t, l, rec(50, 5))
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := readAllRecords(t, l); len(got) != 2 || got[1] != 104 {
		t.Fatalf("records after the retry: %v, want [0 104]", got)
	}
	l.Close()

	// After a power loss the log ends after the retried record.
	l2, res := openLog(t, mem.CrashClone(), RecoverOptions{Crashed: true})
	defer l2.Close()
	if l2.WrittenOffset() != 104+54 || res.TornBytes != 0 {
		t.Fatalf("recovered written %d, torn %d; want %d, 0", l2.WrittenOffset(), res.TornBytes, 104+54)
	}
	checkReadable(t, l2, append(first, second...))
}

// Once records of a batch are in the log (the batch closed a segment), a
// lack of space for the rest fails the log: the batch cannot be undone.
func TestNoSpaceAfterPartOfTheBatchIsFatal(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l, _ := openLog(t, efs, RecoverOptions{})
	defer l.Close()
	appendAll(t, l, rec(100, 1))
	recs := recs300(20)
	// The first write closes segment 0 with records of the batch; the second
	// (into segment 1) fails.
	efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: "commitlog", Skip: 1, Times: 1, Err: syscall.ENOSPC})
	if _, err := l.Append(recs, nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("ENOSPC after records of the batch were written: %v, want ErrFailed", err)
	}
	if _, err := l.Append([][]byte{rec(100, 2)}, nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after the failure: %v", err)
	}
}

// A batch that does not fit in what is left of the segment but fits in a
// fresh one closes the segment with a blank marker and goes whole into the
// next: ENOSPC there is not fatal (split, its first record would have been
// written in the old segment, and the failure would have failed the log).
func TestNoSpaceBatchStartsTheNextSegment(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l, _ := openLog(t, efs, RecoverOptions{})
	defer l.Close()
	recs := recs300(12)
	first := appendAll(t, l, recs...) // 12*304 = 3648 of 4096: one more record fits, two do not
	efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: "commitlog", Skip: 1, Times: 1, Err: syscall.ENOSPC})
	if _, err := l.Append([][]byte{rec(300, 20), rec(300, 21)}, nil); !errors.Is(err, ErrNoSpace) || l.Err() != nil {
		t.Fatalf("ENOSPC in the next segment: %v (log err %v), want ErrNoSpace", err, l.Err())
	}
	if l.WrittenOffset() != testSeg {
		t.Fatalf("written %d, want %d (the segment closed, nothing of the batch written)", l.WrittenOffset(), testSeg)
	}
	next := appendAll(t, l, rec(300, 20), rec(300, 21))
	if next[0].phys != testSeg {
		t.Fatalf("retried batch at %d, want %d", next[0].phys, testSeg)
	}
	checkReadable(t, l, append(first, next...))
}

// A batch whose first record does not fit in the current segment writes
// only the blank marker there; ENOSPC in the next segment is not fatal.
func TestNoSpaceAfterOnlyTheBlankMarker(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l, _ := openLog(t, efs, RecoverOptions{})
	defer l.Close()
	recs := recs300(13)
	first := appendAll(t, l, recs...) // 13*304 = 3952 of 4096
	efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: "commitlog", Skip: 1, Times: 1, Err: syscall.ENOSPC})
	if _, err := l.Append([][]byte{rec(300, 20)}, nil); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("ENOSPC after the blank marker only: %v, want ErrNoSpace", err)
	}
	if l.Err() != nil || l.WrittenOffset() != testSeg {
		t.Fatalf("err %v written %d, want nil %d", l.Err(), l.WrittenOffset(), testSeg)
	}
	next := appendAll(t, l, rec(300, 21))
	if next[0].phys != testSeg {
		t.Fatalf("retried record at %d, want %d", next[0].phys, testSeg)
	}
	checkReadable(t, l, append(first, next...))
}

// The same when the next segment file cannot be created for lack of space.
func TestNoSpaceCreatingTheNextSegment(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l, _ := openLog(t, efs, RecoverOptions{})
	defer l.Close()
	recs := recs300(13)
	first := appendAll(t, l, recs...)
	efs.Inject(vfs.Rule{Ops: vfs.OpOpen, Path: "commitlog", Times: 1, Err: syscall.ENOSPC})
	if _, err := l.Append([][]byte{rec(300, 20)}, nil); !errors.Is(err, ErrNoSpace) || l.Err() != nil {
		t.Fatalf("ENOSPC creating a segment: %v (log err %v), want ErrNoSpace", err, l.Err())
	}
	next := appendAll(t, l, rec(300, 21))
	if next[0].phys != testSeg {
		t.Fatalf("retried record at %d, want %d", next[0].phys, testSeg)
	}
	checkReadable(t, l, append(first, next...))
}

// If the file cannot be cut back after a short write, the log fails.
func TestNoSpaceCutFailureIsFatal(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l, _ := openLog(t, efs, RecoverOptions{})
	defer l.Close()
	appendAll(t, l, rec(100, 1))
	efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: "commitlog", Times: 1, Err: syscall.ENOSPC, ShortWrite: 20})
	efs.Inject(vfs.Rule{Ops: vfs.OpTruncate, Path: "commitlog", Times: 1})
	if _, err := l.Append([][]byte{rec(100, 2)}, nil); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("ENOSPC with a failing cut: %v, want ErrFailed wrapping EIO", err)
	}
	if l.Err() == nil {
		t.Fatal("log not failed")
	}
}

// Any other write error stays fatal.
func TestOtherWriteErrorsStayFatal(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l, _ := openLog(t, efs, RecoverOptions{})
	defer l.Close()
	efs.InjectOnce(vfs.OpWrite, "commitlog") // EIO
	if _, err := l.Append([][]byte{rec(100, 2)}, nil); !errors.Is(err, ErrFailed) || errors.Is(err, ErrNoSpace) {
		t.Fatalf("EIO: %v", err)
	}
}
