package message_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/message"
)

func testBatch(t *testing.T) ([]byte, []message.BatchItem) {
	items := []message.BatchItem{
		{Flag: 1, Body: []byte("one"), Properties: "TAGS\x01a\x02"},
		{Flag: -2, Body: nil, Properties: ""},
		{Flag: 3, Body: bytes.Repeat([]byte{7}, 1000), Properties: strings.Repeat("p", message.MaxPropertiesBytes)},
	}
	b, err := message.EncodeBatch(items)
	if err != nil {
		t.Fatal(err)
	}
	return b, items
}

func TestBatchRoundTrip(t *testing.T) {
	b, items := testBatch(t)
	var got []message.BatchItem
	if err := message.DecodeBatch(b, func(it message.BatchItem) error {
		got = append(got, it)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(items) {
		t.Fatalf("%d items, want %d", len(got), len(items))
	}
	for i := range items {
		if got[i].Flag != items[i].Flag || !bytes.Equal(got[i].Body, items[i].Body) || got[i].Properties != items[i].Properties {
			t.Errorf("item %d = %+v, want %+v", i, got[i], items[i])
		}
	}
	if _, err := message.EncodeBatch([]message.BatchItem{{Properties: strings.Repeat("p", 32768)}}); !errors.Is(err, message.ErrTooLarge) {
		t.Fatalf("EncodeBatch with long properties: %v", err)
	}
}

func TestDecodeBatchRejects(t *testing.T) {
	be := binary.BigEndian
	valid, _ := testBatch(t) // item 0: 22+3+7 = 32 bytes
	cases := []struct {
		name, field string
		edit        func([]byte) []byte
	}{
		{"empty", "empty", func(b []byte) []byte { return nil }},
		{"short tail", "bytes left", func(b []byte) []byte { return append(b, 1, 2, 3) }},
		{"truncated", "TOTALSIZE", func(b []byte) []byte { return b[:len(b)-1] }},
		{"size too small", "TOTALSIZE", func(b []byte) []byte { be.PutUint32(b, 21); return b }},
		{"negative size", "TOTALSIZE", func(b []byte) []byte { be.PutUint32(b, 0x80000000); return b }},
		{"huge size", "TOTALSIZE", func(b []byte) []byte { be.PutUint32(b, 0x7FFFFFFF); return b }},
		{"negative body", "BODYLEN", func(b []byte) []byte { be.PutUint32(b[16:], 0xFFFFFFFF); return b }},
		{"body too long", "BODYLEN", func(b []byte) []byte { be.PutUint32(b[16:], 11); return b }},
		{"body mismatch", "PROPLEN", func(b []byte) []byte { be.PutUint32(b[16:], 2); return b }},
		{"negative props", "PROPLEN", func(b []byte) []byte { be.PutUint16(b[23:], 0xFFFF); return b }},
		{"props mismatch", "PROPLEN", func(b []byte) []byte { be.PutUint16(b[23:], 6); return b }},
	}
	for _, c := range cases {
		calls := 0
		err := message.DecodeBatch(c.edit(bytes.Clone(valid)), func(message.BatchItem) error { calls++; return nil })
		if !errors.Is(err, message.ErrCorrupt) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v; want ErrCorrupt naming %s", c.name, err, c.field)
		}
		if calls != 0 {
			t.Errorf("%s: fn called %d times before the error", c.name, calls)
		}
	}
}

func TestDecodeBatchStopsOnCallbackError(t *testing.T) {
	b, _ := testBatch(t)
	stop := errors.New("stop")
	calls := 0
	err := message.DecodeBatch(b, func(message.BatchItem) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Fatalf("DecodeBatch = %v after %d calls", err, calls)
	}
}

// TestDecodeBatchIgnoresMagicAndCRC: clients write 0, but the fields are not
// checked (the Java broker reads past them too).
func TestDecodeBatchIgnoresMagicAndCRC(t *testing.T) {
	b, _ := testBatch(t)
	binary.BigEndian.PutUint32(b[4:], 0xDAA320A7)
	binary.BigEndian.PutUint32(b[8:], 12345)
	if err := message.DecodeBatch(b, func(message.BatchItem) error { return nil }); err != nil {
		t.Fatal(err)
	}
}
