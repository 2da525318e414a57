package index

import (
	"os"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// FuzzRecover opens an index whose only file holds arbitrary bytes: Open
// must not panic or hang, and Query must stay within the file's entries.
func FuzzRecover(f *testing.F) {
	mem := vfs.NewMem()
	ix := openIndex(f, mem, 3, 50)
	for i := range 12 {
		if err := ix.Put("T#k"+string(rune('a'+i%4)), int64(i)*10, baseTs+int64(i)*1000); err != nil {
			f.Fatal(err)
		}
	}
	if err := ix.Close(); err != nil {
		f.Fatal(err)
	}
	good := readFile(f, mem, testDir+"/"+fileName(1))
	f.Add(good)
	f.Add(good[:len(good)-7])
	f.Add(good[:HeaderSize])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		fs := vfs.NewMem()
		if err := fs.MkdirAll(testDir, 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := fs.OpenFile(testDir+"/"+fileName(1), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt(data, 0); err != nil && len(data) > 0 {
			t.Fatal(err)
		}
		ix, err := Open(Config{FS: fs, Dir: testDir, HashSlots: 3, MaxEntries: 50})
		if err != nil {
			return // an error is fine; a panic or a hang is not
		}
		for _, k := range []string{"T#ka", "T#kb", "T#kc", "T#kd", "x"} {
			if _, err := ix.Query(k, 100, 0, 1<<62); err != nil {
				t.Fatalf("query: %v", err)
			}
		}
		if err := ix.Put("T#ka", ix.MaxPhysOffset()+1, baseTs); err != nil {
			t.Fatalf("put after recovery: %v", err)
		}
		_ = ix.Close()
	})
}

func readFile(t testing.TB, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}
