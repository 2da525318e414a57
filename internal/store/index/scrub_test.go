package index

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// scrubAll runs Scrub to the end in small steps and returns the findings.
func scrubAll(t *testing.T, ix *Index, step int64) ([]string, int64) {
	t.Helper()
	var found []string
	var pos ScrubPos
	total := int64(0)
	for i := 0; ; i++ {
		if i > 100000 {
			t.Fatal("scrub does not end")
		}
		next, n, done, err := ix.Scrub(pos, step, func(path string, at int64, msg string) {
			found = append(found, fmt.Sprintf("%s@%d: %s", path, at, msg))
		})
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return found, total
		}
		if n > step && n > EntrySize {
			t.Fatalf("step read %d bytes, asked for %d", n, step)
		}
		total += n
		pos = next
	}
}

// The files no longer taking puts are checked whole; damage to an entry
// or a slot is reported, and nothing else is.
func TestScrubFindsDamagedEntries(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 16, 10)
	for i := range 25 { // files of 10 entries: two sealed, one taking puts
		if err := ix.Put(fmt.Sprint("T#k", i), int64(i)*100, baseTs+int64(i)*1000); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	found, read := scrubAll(t, ix, 64)
	if len(found) != 0 {
		t.Fatalf("sound index reported: %v", found)
	}
	if want := int64(2 * (16*SlotSize + 10*EntrySize)); read != want {
		t.Fatalf("read %d bytes, want the slots and entries of two files (%d)", read, want)
	}
	// Damage entry 3 of the first file (its physOffset goes backwards) and
	// a slot of the second (names an entry past the file's count).
	f, err := fs.OpenFile(testDir+"/"+fileName(1), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], 50)
	f.WriteAt(b[:], HeaderSize+16*SlotSize+2*EntrySize+4)
	f.Close()
	f, err = fs.OpenFile(testDir+"/"+fileName(2), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint32(b[:4], 99)
	f.WriteAt(b[:4], HeaderSize+5*SlotSize)
	f.Close()
	found, _ = scrubAll(t, ix, 64)
	if len(found) != 2 || !strings.Contains(found[0], fileName(1)+"@3: entry 3 has physOffset 50, below") ||
		!strings.Contains(found[1], fileName(2)+"@5: slot names entry 99") {
		t.Fatalf("findings %q", found)
	}
	ix.Close()
}
