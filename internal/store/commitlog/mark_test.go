package commitlog

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// markSeg is a segment size of many pages, so that an unsynced tail can be
// written back out of order inside one segment.
const markSeg = 1 << 20

const markDir = "/data/commitlog"

func openMarkLog(t testing.TB, fs vfs.FS, notify func(*Log)) *Log {
	t.Helper()
	var l *Log
	cfg := Config{FS: fs, Dir: markDir, SegmentBytes: markSeg}
	if notify != nil {
		cfg.Notify = func() { notify(l) }
	}
	l, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func readMark(t testing.TB, fs vfs.FS) Mark {
	t.Helper()
	m, err := ReadMark(fs, markDir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func flushOrFail(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
}

// Every flush writes the mark before it moves the flushed watermark: a
// waiter the watermark answers (an acknowledged send) lies below the mark.
func TestFlushWritesTheMarkBeforeTheWatermark(t *testing.T) {
	fs := vfs.NewMem()
	var behind []int64
	l := openMarkLog(t, fs, func(l *Log) {
		if m, err := ReadMark(fs, markDir); err != nil || m.Offset < l.FlushedOffset() {
			behind = append(behind, l.FlushedOffset())
		}
	})
	if _, err := l.Recover(RecoverOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		appendAll(t, l, rec(1000+i, byte(i)), rec(3000, byte(i)))
		flushOrFail(t, l)
		if m := readMark(t, fs); m.Offset != l.FlushedOffset() {
			t.Fatalf("mark %d after a flush to %d", m.Offset, l.FlushedOffset())
		}
	}
	if len(behind) > 0 {
		t.Fatalf("the flushed watermark passed the mark at %v", behind)
	}
}

// crashLog appends rounds of flushed records, then records no flush
// covered (the group commit in flight), and returns the flushed ones, the
// unflushed ones and the flushed offset after round lag (a checkpoint that
// lags).
func crashLog(t *testing.T, l *Log, rng *rand.Rand, rounds, lag, inflight int) (flushed, unflushed []appended, checkpoint int64) {
	t.Helper()
	for r := range rounds {
		for range 1 + rng.IntN(3) {
			flushed = append(flushed, appendAll(t, l, rec(500+rng.IntN(3000), byte(r)))...)
		}
		flushOrFail(t, l)
		if r == lag {
			checkpoint = l.FlushedOffset()
		}
	}
	for i := range inflight {
		unflushed = append(unflushed, appendAll(t, l, rec(500+rng.IntN(3000), byte(100+i)))...)
	}
	return flushed, unflushed, checkpoint
}

// A power loss after the page cache wrote back an arbitrary subset of the
// unsynced pages, in no order, still recovers, and keeps every record a
// flush covered: the invalid entries past the flushed mark are an
// unsynced tail, cut into quarantine.
func TestPowerLossWriteBackOutOfOrderKeepsEveryFlushedRecord(t *testing.T) {
	outOfOrder := 0
	for seed := uint64(0); seed < 80; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		fs := vfs.NewMem()
		l := openMarkLog(t, fs, nil)
		if _, err := l.Recover(RecoverOptions{}); err != nil {
			t.Fatal(err)
		}
		flushed, _, checkpoint := crashLog(t, l, rng, 12, 3, 20)
		end := l.FlushedOffset()
		crashed := fs.CrashCloneWriteBack(rng)
		l2 := openMarkLog(t, crashed, nil)
		res, err := l2.Recover(RecoverOptions{From: checkpoint, DurableFrom: checkpoint, MustReach: checkpoint,
			Crashed: true, QuarantineDir: "/data/quarantine"})
		if err != nil {
			t.Fatalf("seed %d: the start after a power loss failed: %v", seed, err)
		}
		if res.End < end {
			t.Fatalf("seed %d: recovered end %d before the flushed offset %d", seed, res.End, end)
		}
		checkReadable(t, l2, flushed)
		if res.UnsyncedBytes > 0 {
			outOfOrder++
			if res.TornAt < end || !strings.Contains(res.TornReason, "out of order") {
				t.Fatalf("seed %d: unsynced tail cut at %d (%s), flushed to %d", seed, res.TornAt, res.TornReason, end)
			}
		}
	}
	t.Logf("%d of 80 power losses left an unsynced tail written back out of order", outOfOrder)
	if outOfOrder < 10 {
		t.Fatalf("only %d of 80 power losses left an unsynced tail written back out of order", outOfOrder)
	}
}

// flipByte flips one byte at CommitLog offset off in the files of fs, as
// damage at rest does (no crash: the page cache holds it).
func flipByte(t *testing.T, fs vfs.FS, off int64) {
	t.Helper()
	f, err := fs.OpenFile(markDir+"/"+SegmentName(off-off%markSeg), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off%markSeg); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b[:], off%markSeg); err != nil {
		t.Fatal(err)
	}
}

func segmentBytes(t *testing.T, fs vfs.FS, base int64) []byte {
	t.Helper()
	f, err := fs.OpenFile(markDir+"/"+SegmentName(base), os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, size)
	f.ReadAt(b, 0)
	return b
}

// After a process kill (the page cache keeps every write), a byte flipped
// in a record that a flush covered, past the lagging checkpoint, is damage
// to durable data: Recover refuses and changes nothing, and a repair
// replaces exactly that record by a hole, keeping every other one. It used
// to be cut, with everything after it, as an unsynced tail.
func TestKillThenDamageBelowTheMarkIsCorruption(t *testing.T) {
	for _, inflight := range []int{3, 0} {
		rng := rand.New(rand.NewPCG(1, uint64(inflight)))
		fs := vfs.NewMem()
		l := openMarkLog(t, fs, nil)
		if _, err := l.Recover(RecoverOptions{}); err != nil {
			t.Fatal(err)
		}
		flushed, unflushed, checkpoint := crashLog(t, l, rng, 12, 3, inflight)
		l.Close() // no flush: a kill
		victim := flushed[len(flushed)-1]
		if victim.phys < checkpoint {
			t.Fatal("the victim must lie past the checkpoint")
		}
		flipByte(t, fs, victim.phys+int64(len(victim.rec))/2)
		before := segmentBytes(t, fs, 0)
		opts := RecoverOptions{From: checkpoint, DurableFrom: checkpoint, MustReach: checkpoint, Crashed: true, QuarantineDir: "/data/quarantine"}

		l2 := openMarkLog(t, fs, nil)
		_, err := l2.Recover(opts)
		var ce *CorruptionError
		var me *MissingError
		switch {
		case inflight > 0 && (!errors.As(err, &ce) || ce.Offset != victim.phys || !strings.Contains(ce.Reason, "fdatasynced before the crash")):
			t.Fatalf("valid records after the damage: want corruption at %d, got %v", victim.phys, err)
		case inflight == 0 && (!errors.As(err, &me) || me.Offset != victim.phys):
			t.Fatalf("nothing valid after the damage: want missing durable data at %d, got %v", victim.phys, err)
		}
		l2.Close()
		if !bytes.Equal(segmentBytes(t, fs, 0), before) {
			t.Fatal("a refusing Recover changed the segment")
		}
		if names, _ := fs.List("/data/quarantine"); len(names) != 0 {
			t.Fatalf("a refusing Recover quarantined %v", names)
		}
		if inflight == 0 {
			continue // a repair cuts the torn-looking end; covered elsewhere
		}

		opts.Repair = true
		l3 := openMarkLog(t, fs, nil)
		res, err := l3.Recover(opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Repaired) != 1 || res.Repaired[0].Offset != victim.phys || res.UnsyncedBytes != 0 {
			t.Fatalf("repair: %+v", res)
		}
		checkReadable(t, l3, flushed[:len(flushed)-1])
		checkReadable(t, l3, unflushed)
		if _, err := l3.ReadEntry(victim.phys, int32(len(victim.rec)), nil); !errors.Is(err, ErrHole) {
			t.Fatalf("the damaged record reads %v, want a hole", err)
		}
	}
}

// A log without a mark (written by an earlier release) or with an invalid
// one recovers as before, on the caller's durable offset alone.
func TestRecoverWithoutAValidMark(t *testing.T) {
	for _, damage := range []string{"missing", "invalid"} {
		rng := rand.New(rand.NewPCG(2, 2))
		fs := vfs.NewMem()
		l := openMarkLog(t, fs, nil)
		if _, err := l.Recover(RecoverOptions{}); err != nil {
			t.Fatal(err)
		}
		flushed, _, checkpoint := crashLog(t, l, rng, 12, 3, 3)
		l.Close()
		if damage == "missing" {
			fs.Remove(markDir + "/" + MarkName)
		} else {
			f, _ := fs.OpenFile(markDir+"/"+MarkName, os.O_RDWR, 0)
			f.WriteAt([]byte{0xff}, 9)
			f.Close()
		}
		victim := flushed[len(flushed)-1]
		flipByte(t, fs, victim.phys+20)
		l2 := openMarkLog(t, fs, nil)
		res, err := l2.Recover(RecoverOptions{From: checkpoint, DurableFrom: checkpoint, MustReach: checkpoint, Crashed: true, QuarantineDir: "/data/quarantine"})
		if err != nil || res.TornAt != victim.phys || res.UnsyncedBytes == 0 || res.Mark.Found {
			t.Fatalf("%s mark: want the pre-mark cut at %d: %+v %v", damage, victim.phys, res, err)
		}
		if damage == "invalid" && res.Mark.Invalid == "" {
			t.Fatal("an invalid mark not reported")
		}
		if m := readMark(t, fs); !m.Found || m.Offset != res.End {
			t.Fatalf("mark after recovery %+v, want %d", m, res.End)
		}
	}
}

// Truncating the log lowers the mark first, durably; so does finishing an
// interrupted truncation on a closed log.
func TestTruncateLowersTheMark(t *testing.T) {
	fs := vfs.NewMem()
	l := openMarkLog(t, fs, nil)
	if _, err := l.Recover(RecoverOptions{}); err != nil {
		t.Fatal(err)
	}
	all := appendAll(t, l, rec(1000, 1), rec(1000, 2), rec(1000, 3), rec(1000, 4))
	flushOrFail(t, l)
	if err := l.Truncate(all[3].phys); err != nil {
		t.Fatal(err)
	}
	if m := readMark(t, fs.CrashClone()); m.Offset != all[3].phys {
		t.Fatalf("durable mark %d after truncating at %d", m.Offset, all[3].phys)
	}
	l.Close()
	if err := TruncateFiles(fs, markDir, markSeg, all[1].phys); err != nil {
		t.Fatal(err)
	}
	if m := readMark(t, fs.CrashClone()); m.Offset != all[1].phys {
		t.Fatalf("durable mark %d after TruncateFiles at %d", m.Offset, all[1].phys)
	}
}

// An empty log moved to an earlier start lowers the mark: the bytes it
// will write there are not durable yet.
func TestStartAtEarlierLowersTheMark(t *testing.T) {
	fs := vfs.NewMem()
	l := openMarkLog(t, fs, nil)
	if _, err := l.Recover(RecoverOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.StartAt(4 * markSeg); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = openMarkLog(t, fs, nil)
	if res, err := l.Recover(RecoverOptions{}); err != nil || res.End != 4*markSeg {
		t.Fatalf("recover: %+v %v", res, err)
	}
	if m := readMark(t, fs); m.Offset != 4*markSeg {
		t.Fatalf("mark %d after recovering an empty log at %d", m.Offset, 4*markSeg)
	}
	if err := l.StartAt(markSeg); err != nil {
		t.Fatal(err)
	}
	if m := readMark(t, fs.CrashClone()); m.Offset != markSeg {
		t.Fatalf("durable mark %d after starting at %d", m.Offset, markSeg)
	}
}
