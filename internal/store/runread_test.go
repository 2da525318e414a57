package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// preadCountFS counts the reads of CommitLog segment files and their bytes.
type preadCountFS struct {
	vfs.FS
	reads, bytes atomic.Int64
}

type preadCountFile struct {
	vfs.File
	fs *preadCountFS
}

func (fs *preadCountFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(name, "/commitlog/") {
		return f, err
	}
	return preadCountFile{f, fs}, nil
}

func (f preadCountFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.fs.reads.Add(1)
	f.fs.bytes.Add(int64(n))
	return n, err
}

// putBatch stores n messages of (topic, qid) with one PutMessages, so that
// they lie next to each other in the CommitLog, with bodies "<tag>-<i>"
// padded to pad bytes.
func putBatch(t *testing.T, s *Store, topic string, qid int32, tag string, n, pad int) []*message.Message {
	t.Helper()
	var ms []*message.Message
	for i := range n {
		b := fmt.Sprintf("%s-%d-", tag, i)
		ms = append(ms, newMsg(topic, qid, b+strings.Repeat("p", max(pad-len(b), 0)), nil))
	}
	if r := s.PutMessages(context.Background(), ms); r.Status != PutOK {
		t.Fatalf("put batch %s: %v %v", tag, r.Status, r.Err)
	}
	return ms
}

// checkRecords fails unless r holds exactly the stored records of want, in
// order.
func checkRecords(t *testing.T, r *GetResult, want []*message.Message) {
	t.Helper()
	if len(r.Records) != len(want) {
		t.Fatalf("got %d records %v, want %d", len(r.Records), bodies(r), len(want))
	}
	total := 0
	for i, rec := range r.Records {
		v := message.View(rec)
		if string(v.Body()) != string(want[i].Body) || v.QueueOffset() != want[i].QueueOffset || v.PhysOffset() != want[i].PhysOffset {
			t.Fatalf("record %d: body %.12q offset %d phys %d, want %.12q offset %d phys %d",
				i, v.Body(), v.QueueOffset(), v.PhysOffset(), want[i].Body, want[i].QueueOffset, want[i].PhysOffset)
		}
		if len(rec) != want[i].StoredSize() {
			t.Fatalf("record %d: %d bytes, want %d", i, len(rec), want[i].StoredSize())
		}
		total += len(rec)
	}
	if r.TotalBytes != total {
		t.Fatalf("TotalBytes %d, records add up to %d", r.TotalBytes, total)
	}
}

// A queue's records interleaved with another queue's: each contiguous run
// is read with one pread, and nothing of the other queue slips in.
func TestGetMessageRunsWithGaps(t *testing.T) {
	fs := &preadCountFS{FS: vfs.NewMem()}
	s := mustOpen(t, fileReadConfig(fs))
	defer s.Close()
	var q0, q1 []*message.Message
	for i, n := range []int{3, 1, 2, 2, 4, 1} {
		if i%2 == 0 {
			q0 = append(q0, putBatch(t, s, "T", 0, fmt.Sprint("a", i), n, 200)...)
		} else {
			q1 = append(q1, putBatch(t, s, "T", 1, fmt.Sprint("b", i), n, 300)...)
		}
	}
	waitVisible(t, s, "T", 0, int64(len(q0)))
	waitVisible(t, s, "T", 1, int64(len(q1)))

	for _, c := range []struct {
		qid   int32
		want  []*message.Message
		reads int64
	}{{0, q0, 3}, {1, q1, 3}} {
		before := fs.reads.Load()
		r, err := s.GetMessage("T", c.qid, 0, 32, 1<<20, nil)
		if err != nil || r.Status != Found || r.NextOffset != int64(len(c.want)) {
			t.Fatalf("queue %d: %v %v next %d", c.qid, r.Status, err, r.NextOffset)
		}
		checkRecords(t, r, c.want)
		if got := fs.reads.Load() - before; got != c.reads {
			t.Fatalf("queue %d: %d preads for %d runs", c.qid, got, c.reads)
		}
		r.Release()
	}
	// Starting inside a run reads the rest of it and the runs after.
	r, err := s.GetMessage("T", 0, 1, 32, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, r, q0[1:])
	r.Release()
}

// A queue whose records fill several segments: a run stops at the blank
// marker closing a segment and the next starts in the following one.
func TestGetMessageRunCrossesSegmentEnd(t *testing.T) {
	fs := &preadCountFS{FS: vfs.NewMem()}
	s := mustOpen(t, fileReadConfig(fs)) // 64 KiB segments
	defer s.Close()
	var want []*message.Message
	for i := range 10 {
		want = append(want, putBatch(t, s, "T", 0, fmt.Sprint("s", i), 3, 5000)...)
	}
	waitVisible(t, s, "T", 0, int64(len(want)))
	segs := map[int64]bool{}
	for _, m := range want {
		segs[s.log.SegmentStart(m.PhysOffset)] = true
	}
	if len(segs) < 3 {
		t.Fatalf("the records fill %d segments, want at least 3", len(segs))
	}
	for _, from := range []int64{0, 5, 11} {
		before := fs.reads.Load()
		r, err := s.GetMessage("T", 0, from, 64, 1<<20, nil)
		if err != nil || r.NextOffset != int64(len(want)) {
			t.Fatalf("from %d: %v next %d", from, err, r.NextOffset)
		}
		checkRecords(t, r, want[from:])
		spanned := map[int64]bool{}
		for _, m := range want[from:] {
			spanned[s.log.SegmentStart(m.PhysOffset)] = true
		}
		if got := fs.reads.Load() - before; got != int64(len(spanned)) {
			t.Fatalf("from %d: %d preads for records in %d segments", from, got, len(spanned))
		}
		r.Release()
	}
}

// maxCount and maxBytes cut a run: the get returns (and reads) only what
// fits, and the next get continues right after it.
func TestGetMessageLimitsCutARun(t *testing.T) {
	fs := &preadCountFS{FS: vfs.NewMem()}
	s := mustOpen(t, fileReadConfig(fs))
	defer s.Close()
	want := putBatch(t, s, "T", 0, "c", 10, 1000)
	waitVisible(t, s, "T", 0, 10)
	size := want[0].StoredSize()
	steps := []struct {
		count, maxBytes int
		n               int
	}{
		{4, 1 << 20, 4},          // count cuts
		{32, 2*size + size/2, 2}, // bytes cut
		{32, 1, 1},               // at least one
		{1, 1 << 20, 1},
		{32, 1 << 20, 2}, // the rest
	}
	off := int64(0)
	for _, st := range steps {
		before := fs.bytes.Load()
		r, err := s.GetMessage("T", 0, off, st.count, st.maxBytes, nil)
		if err != nil || r.NextOffset != off+int64(st.n) {
			t.Fatalf("get %d at %d (max %d bytes): %v next %d", st.count, off, st.maxBytes, err, r.NextOffset)
		}
		checkRecords(t, r, want[off:off+int64(st.n)])
		if read := fs.bytes.Load() - before; read != int64(st.n*(size+commitlog.TrailerBytes)) {
			t.Fatalf("get %d at %d: read %d bytes for %d records of %d", st.count, off, read, st.n, size)
		}
		off = r.NextOffset
		r.Release()
	}
	if off != 10 {
		t.Fatalf("ended at %d", off)
	}
}

// runFixture is a closed store whose queue T/0 holds one run of 10 records
// in its first segment, followed by enough of T/1 to close that segment.
func runFixture(t *testing.T) (*vfs.MemFS, Config, []*message.Message) {
	withVerifyTail(t, 16<<10) // Open does not verify the run's segment: reads must catch its damage
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	s := mustOpen(t, cfg)
	run := putBatch(t, s, "T", 0, "r", 10, 1000)
	for range 30 {
		putBatch(t, s, "T", 1, "f", 4, 1000)
	}
	if s.log.SegmentStart(s.log.WrittenOffset()) <= cfg.CommitLogSegmentBytes {
		t.Fatal("the run's segment is the last or the one before")
	}
	waitVisible(t, s, "T", 1, 120)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return fs, cfg, run
}

// rewrite applies fn to the stored record m and, if fixCRC, rewrites its
// CRC trailer to match, so only the header checks can catch the change.
func rewrite(t *testing.T, fs *vfs.MemFS, cfg Config, m *message.Message, fixCRC bool, fn func(rec []byte)) {
	t.Helper()
	seg := m.PhysOffset - m.PhysOffset%cfg.CommitLogSegmentBytes
	f, err := fs.OpenFile("/data/commitlog/"+commitlog.SegmentName(seg), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entry := make([]byte, m.StoredSize()+commitlog.TrailerBytes)
	if _, err := f.ReadAt(entry, m.PhysOffset-seg); err != nil {
		t.Fatal(err)
	}
	rec := entry[:m.StoredSize()]
	fn(rec)
	if fixCRC {
		binary.BigEndian.PutUint32(entry[len(rec):], commitlog.Checksum(rec))
	}
	if _, err := f.WriteAt(entry, m.PhysOffset-seg); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// A bad record in the middle of a run is refused, whatever check catches
// it, and its neighbours in the same pread are still served intact.
func TestGetMessageCorruptRecordInARun(t *testing.T) {
	const victim = 5
	damages := map[string]struct {
		fixCRC bool
		fn     func(rec []byte)
	}{
		"body byte (CRC)":    {false, func(rec []byte) { rec[len(rec)-20] ^= 0x40 }},
		"queue offset":       {true, func(rec []byte) { binary.BigEndian.PutUint64(rec[20:], victim+1) }},
		"queue id":           {true, func(rec []byte) { binary.BigEndian.PutUint32(rec[12:], 1) }},
		"total size":         {false, func(rec []byte) { binary.BigEndian.PutUint32(rec[0:], uint32(len(rec)-4)) }},
		"magic (blank)":      {false, func(rec []byte) { blank := message.MagicBlank; binary.BigEndian.PutUint32(rec[4:], uint32(blank)) }},
		"topic, CRC matches": {true, func(rec []byte) { copy(message.View(rec).Topic(), "U") }},
	}
	filters := map[string]Filter{"no filter": nil, "filter": collidingFilter{""}}
	for name, d := range damages {
		for fname, f := range filters {
			t.Run(name+"/"+fname, func(t *testing.T) {
				fs, cfg, run := runFixture(t)
				rewrite(t, fs, cfg, run[victim], d.fixCRC, d.fn)
				s := mustOpen(t, cfg)
				defer s.Close()

				r, err := s.GetMessage("T", 0, 0, 32, 1<<20, f)
				if name == "magic (blank)" {
					// A blank marker where an entry points reads as "no
					// record": the entry is skipped, never served.
					if err != nil || r.Status != Found || r.NextOffset != 10 {
						t.Fatalf("get from 0: %v %v next %d", r.Status, err, r.NextOffset)
					}
					checkRecords(t, r, append(run[:victim:victim], run[victim+1:]...))
					r.Release()
					r, err = s.GetMessage("T", 0, victim, 1, 1<<20, f)
					if err != nil || r.NextOffset != victim+2 {
						t.Fatalf("get at the blanked record: %v next %d", err, r.NextOffset)
					}
					checkRecords(t, r, run[victim+1:victim+2])
					r.Release()
				} else {
					// The bad record is isolated (isolate.go): never
					// served, and the batch goes on after it.
					if err != nil || r.Status != Found || r.NextOffset != 10 {
						t.Fatalf("get from 0: %v %v next %d, want every record but the bad one", r.Status, err, r.NextOffset)
					}
					checkRecords(t, r, append(run[:victim:victim], run[victim+1:]...))
					r.Release()
					r, err = s.GetMessage("T", 0, victim, 1, 1<<20, f)
					if err != nil || r.Status != Found || r.NextOffset != victim+2 {
						t.Fatalf("get at the bad record: %v next %d, want the record after it", err, r.NextOffset)
					}
					checkRecords(t, r, run[victim+1:victim+2])
					r.Release()
					if s.Stats().CorruptReads == 0 {
						t.Fatal("corrupt read not counted")
					}
					if iso := s.Isolated(); len(iso) != 1 || iso[0].QueueOffset != victim {
						t.Fatalf("isolated %+v, want the record at offset %d", iso, victim)
					}
				}

				r, err = s.GetMessage("T", 0, victim+1, 32, 1<<20, f)
				if err != nil || r.NextOffset != 10 {
					t.Fatalf("get after the bad record: %v next %d", err, r.NextOffset)
				}
				checkRecords(t, r, run[victim+1:])
				r.Release()
			})
		}
	}
}
