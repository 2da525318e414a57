package translate

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// setEntry appends one message-set entry of magic 0 or 1.
func setEntry(dst []byte, magic, attrs byte, ts int64, key, value []byte) []byte {
	be := binary.BigEndian
	var m []byte
	m = append(m, 0, 0, 0, 0, magic, attrs)
	if magic == 1 {
		m = be.AppendUint64(m, uint64(ts))
	}
	for _, f := range [][]byte{key, value} {
		if f == nil {
			m = be.AppendUint32(m, 0xFFFFFFFF)
			continue
		}
		m = be.AppendUint32(m, uint32(len(f)))
		m = append(m, f...)
	}
	be.PutUint32(m, crc32.ChecksumIEEE(m[4:]))
	dst = be.AppendUint64(dst, 0)
	dst = be.AppendUint32(dst, uint32(len(m)))
	return append(dst, m...)
}

func upgraded(t *testing.T, set []byte) []KafkaRecord {
	t.Helper()
	b, err := UpgradeMessageSet(set, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	var out []KafkaRecord
	if err := EachKafkaRecord(b, DefaultLimit, func(r *KafkaRecord) error {
		out = append(out, KafkaRecord{Offset: r.Offset, Timestamp: r.Timestamp, Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value)})
		return nil
	}); err != nil {
		t.Fatalf("the upgraded batch does not parse: %v", err)
	}
	return out
}

// TestUpgradeMessageSet: magic 0 and 1 messages, plain and in a gzip
// wrapper, become records of one batch with their keys, values (null
// kept apart from empty) and timestamps, at offsets 0..n-1; a
// LogAppendTime wrapper stamps its messages; a bad CRC, a truncated
// entry and a wrapper in a wrapper are refused.
func TestUpgradeMessageSet(t *testing.T) {
	var set []byte
	set = setEntry(set, 0, 0, 0, nil, []byte("v0"))
	set = setEntry(set, 1, 0, 1000, []byte("k1"), []byte{})
	var inner []byte
	inner = setEntry(inner, 1, 0, 2000, []byte("k2"), []byte("in-2"))
	inner = setEntry(inner, 1, 0, 2001, nil, []byte("in-3"))
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(inner)
	zw.Close()
	set = setEntry(set, 1, codecGzip, 5000, nil, z.Bytes())
	set = setEntry(set, 1, codecGzip|msgAttrLogAppend, 7000, nil, z.Bytes())
	got := upgraded(t, set)
	want := []KafkaRecord{
		{0, -1, nil, []byte("v0"), nil}, {1, 1000, []byte("k1"), []byte{}, nil},
		{2, 2000, []byte("k2"), []byte("in-2"), nil}, {3, 2001, nil, []byte("in-3"), nil},
		{4, 7000, []byte("k2"), []byte("in-2"), nil}, {5, 7000, nil, []byte("in-3"), nil},
	}
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Offset != w.Offset || g.Timestamp != w.Timestamp || !bytes.Equal(g.Key, w.Key) || (g.Key == nil) != (w.Key == nil) ||
			!bytes.Equal(g.Value, w.Value) || (g.Value == nil) != (w.Value == nil) {
			t.Errorf("record %d: %+v, want %+v", i, g, w)
		}
	}
	bad := bytes.Clone(set)
	bad[len(bad)-1] ^= 1
	nested := setEntry(nil, 1, codecGzip, 0, nil, func() []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write(setEntry(nil, 1, codecGzip, 0, nil, z.Bytes()))
		w.Close()
		return b.Bytes()
	}())
	for name, in := range map[string][]byte{"bad crc": bad, "truncated": set[:len(set)-3], "nested": nested, "empty": {}, "magic 2": setEntry(nil, 2, 0, 0, nil, nil)} {
		if _, err := UpgradeMessageSet(in, DefaultLimit); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := UpgradeMessageSet(setEntry(nil, 1, codecGzip, 0, nil, z.Bytes()), 10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a wrapper inflating beyond the limit: %v, want ErrTooLarge", err)
	}
}

// FuzzUpgradeMessageSet: any input is refused or gives a batch that
// parses.
func FuzzUpgradeMessageSet(f *testing.F) {
	f.Add(setEntry(setEntry(nil, 0, 0, 0, nil, []byte("a")), 1, 0, 5, []byte("k"), nil))
	f.Add(setEntry(nil, 1, codecGzip, 0, nil, []byte{0x1f, 0x8b}))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := UpgradeMessageSet(b, 1<<16)
		if err != nil {
			return
		}
		if err := EachKafkaRecord(out, 1<<20, func(*KafkaRecord) error { return nil }); err != nil {
			t.Fatalf("an accepted set gave a batch that does not parse: %v", err)
		}
	})
}
