package index

import (
	"strconv"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// BenchmarkPut includes MemFS's own cost of recording writes for crash
// simulation.
func BenchmarkPut(b *testing.B) {
	ix := openIndex(b, vfs.NewMem(), 1<<16, 1<<22)
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = "TopicA#key-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	for i := range b.N {
		if err := ix.Put(keys[i%len(keys)], int64(i)*100, baseTs+int64(i)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkQuery(b *testing.B) {
	ix := openIndex(b, vfs.NewMem(), 1<<14, 1<<20)
	keys := make([]string, 1<<15)
	for i := range keys {
		keys[i] = "TopicA#key-" + strconv.Itoa(i)
	}
	for i := range 1 << 17 { // 4 entries per key, 2 keys per slot
		if err := ix.Put(keys[i%len(keys)], int64(i)*100, baseTs+int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		got, err := ix.Query(keys[i%len(keys)], 32, 0, 1<<62)
		if err != nil || len(got) != 4 {
			b.Fatalf("%v %v", got, err)
		}
	}
}

// BenchmarkRecoverRebuild measures Open of an index whose newest file was
// being written when the power failed (entries synced beyond the durable
// header, so its slot table is rebuilt from the entries), against Open of
// the same file settled. Sizes are the defaults scaled down by 10: 500,000
// slots, a full file of 2,000,000 entries (42 MB). The cost is linear in
// the file's entries; at the defaults expect about 10 times the crashed
// time per op.
func BenchmarkRecoverRebuild(b *testing.B) {
	const slots, entries = DefaultHashSlots / 10, DefaultMaxEntries / 10
	base := vfs.NewMem()
	ix := openIndex(b, base, slots, entries)
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = "TopicA#key-" + strconv.Itoa(i)
	}
	for i := range entries - pendingBatch {
		if err := ix.Put(keys[i%len(keys)], int64(i)*100, baseTs+int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := ix.Flush(); err != nil {
		b.Fatal(err)
	}
	settled := base.CrashClone()
	// The last batch reaches the disk, the header that would count it
	// does not.
	for i := entries - pendingBatch; i < entries; i++ {
		if err := ix.Put(keys[i%len(keys)], int64(i)*100, baseTs+int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	f := ix.files[len(ix.files)-1]
	if err := f.writeAllPending(); err != nil {
		b.Fatal(err)
	}
	if err := f.sync(); err != nil {
		b.Fatal(err)
	}
	crashed := base.CrashClone()
	ix, lb := openLogged(b, crashed.CrashClone(), slots, entries)
	if !strings.Contains(lb.String(), "rebuilt the slot table") {
		b.Fatalf("no rebuild:\n%s", lb)
	}
	_ = ix.Close()
	for _, c := range []struct {
		name string
		fs   *vfs.MemFS
	}{{"crashed", crashed}, {"settled", settled}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				fs := c.fs.CrashClone()
				b.StartTimer()
				ix := openIndex(b, fs, slots, entries)
				b.StopTimer()
				if got := ix.MaxPhysOffset(); got < int64(entries-pendingBatch-1)*100 {
					b.Fatalf("MaxPhysOffset %d after recovery", got)
				}
				_ = ix.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(entries), "entries/op")
		})
	}
}

// BenchmarkPutFlush is the store's pattern: one unique key per message
// (UNIQ_KEY) spread over a slot table of 1 Mi slots (4 MiB), a Flush every
// 4096 Puts, on the real filesystem with fdatasync left out (countFS), so
// it measures the CPU cost of the writes. writes/op counts WriteAt calls.
func BenchmarkPutFlush(b *testing.B) {
	cfs := &countFS{FS: vfs.OS{}, noSync: true}
	ix, err := Open(Config{FS: cfs, Dir: b.TempDir() + "/index", HashSlots: 1 << 20, MaxEntries: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer ix.Close()
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "TopicA#AC11000100002A9F0000" + strconv.Itoa(1_000_000+i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	w0 := cfs.writes.Load()
	for i := range b.N {
		if err := ix.Put(keys[i%len(keys)], int64(i)*100, baseTs+int64(i)); err != nil {
			b.Fatal(err)
		}
		if i%4096 == 4095 {
			if err := ix.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := ix.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cfs.writes.Load()-w0)/float64(b.N), "writes/op")
}
