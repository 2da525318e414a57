package kafka

import (
	"os"
	"testing"

	"github.com/keelmq/keel/internal/translate"
	"github.com/keelmq/keel/internal/vfs"
)

// validCopy is the bytes of a copy of three batches.
func validCopy(t testing.TB) []byte {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/c", 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := newCopyWriter(fs, "/c", queueKey{"t", 0}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, base := range []int64{3, 10, 20} {
		b := translate.AppendKafkaBatch(nil, []translate.KafkaRecord{{Offset: base, Key: []byte("k"), Value: []byte{byte(i)}}})
		if err := w.add(b, int64(i)-1); err != nil {
			t.Fatal(err)
		}
	}
	c, err := w.finish(0, 30, 0, 1234)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := c.f.Size()
	out := make([]byte, size)
	if _, err := c.f.ReadAt(out, 0); err != nil {
		t.Fatal(err)
	}
	c.f.Close()
	return out
}

// FuzzReadCopy: whatever a copy file holds, opening it never panics, and
// a copy it accepts has frames in offset order below its cleaned point,
// each batch reading back whole.
func FuzzReadCopy(f *testing.F) {
	good := validCopy(f)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(good[:copyHeaderBytes])
	flipped := append([]byte(nil), good...)
	flipped[copyHeaderBytes+20] ^= 1
	f.Add(flipped)
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := vfs.NewMem()
		file, err := fs.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer file.Close()
		if _, err := file.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		c, err := readCopy(file)
		if err != nil {
			return
		}
		prev := c.from - 1
		var buf []byte
		for i, fr := range c.frames {
			if fr.base <= prev || fr.last >= c.cleaned || fr.last < fr.base {
				t.Fatalf("frame %d at %d-%d after %d, cleaned %d", i, fr.base, fr.last, prev, c.cleaned)
			}
			if buf, err = c.batch(i, buf); err != nil {
				t.Fatalf("frame %d accepted at open, unreadable: %v", i, err)
			}
			if _, err := parseBatchHeader(buf); err != nil {
				t.Fatal(err)
			}
			prev = fr.last
		}
	})
}

// TestReadCopyRefusesDamage: a valid copy opens with its frames; any one
// byte changed, or the file cut, is refused.
func TestReadCopyRefusesDamage(t *testing.T) {
	good := validCopy(t)
	open := func(data []byte) (*compactCopy, error) {
		fs := vfs.NewMem()
		file, _ := fs.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o644)
		file.WriteAt(data, 0)
		return readCopy(file)
	}
	c, err := open(good)
	if err != nil || len(c.frames) != 3 || c.cleaned != 30 || c.frames[1].base != 10 || c.frames[2].horizon != 1 {
		t.Fatalf("a valid copy: %+v %v", c, err)
	}
	for i := range good {
		bad := append([]byte(nil), good...)
		bad[i] ^= 0x40
		if _, err := open(bad); err == nil && (i < 60 || i >= copyHeaderBytes) { // 60-63: reserved, not read
			t.Fatalf("byte %d changed: accepted", i)
		}
	}
	if _, err := open(good[:len(good)-1]); err == nil {
		t.Fatal("a cut copy: accepted")
	}
}
