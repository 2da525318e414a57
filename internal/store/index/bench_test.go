package index

import (
	"strconv"
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
