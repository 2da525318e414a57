package remoting

import (
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Decoding bounds: what one header may cost, checked by the tests below
// and by the fuzz targets. A header decodes to at most
// maxAllocPerHeaderByte bytes of heap per header byte plus
// headerAllocSlackBytes (the Command and a map of MaxExtFields fields).
const (
	maxAllocPerHeaderByte = 4
	headerAllocSlackBytes = 64 << 10
)

// allocatedBytes returns the heap bytes f allocated: the least of three
// runs, since the count is the process's and goroutines other tests left
// running may allocate meanwhile.
func allocatedBytes(f func()) uint64 {
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// checkHeaderAllocs fails t when decoding data with dec allocates more
// than the bound, and returns the bytes allocated per input byte.
func checkHeaderAllocs(t testing.TB, dec func([]byte) (*Command, error), data []byte) float64 {
	t.Helper()
	n := allocatedBytes(func() { dec(data) })
	if limit := uint64(maxAllocPerHeaderByte*len(data) + headerAllocSlackBytes); n > limit {
		t.Fatalf("a header of %d bytes allocated %d bytes (%.1f per byte), above the bound of %d",
			len(data), n, float64(n)/float64(max(1, len(data))), limit)
	}
	return float64(n) / float64(max(1, len(data)))
}

// jsonHeaderWithExt is a JSON header whose extFields holds n distinct
// fields with empty values: the cheapest bytes per decoded field.
func jsonHeaderWithExt(n int) []byte {
	b := []byte(`{"code":10,"extFields":{`)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = strconv.AppendInt(b, int64(i), 36)
		b = append(b, `":""`...)
	}
	return append(b, "}}"...)
}

// binaryHeaderWithExt is a ROCKETMQ header with n ext entries of an empty
// key and value (6 bytes each, all the same key).
func binaryHeaderWithExt(n int) []byte {
	b := make([]byte, binaryFixedBytes, binaryFixedBytes+6*n)
	binary.BigEndian.PutUint32(b[17:], uint32(6*n))
	return append(b, make([]byte, 6*n)...)
}

func TestHeaderExtFieldsBounded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header func(n int) []byte
		dec    func([]byte) (*Command, error)
		fields func(n int) int // distinct fields decoded from header(n)
		huge   int             // fields in a header of about 16 MiB
	}{
		{"json", jsonHeaderWithExt, func(b []byte) (*Command, error) { return decodeJSONHeader(b, nil) }, func(n int) int { return n }, 1_680_000},
		{"rocketmq", binaryHeaderWithExt, decodeBinaryHeader, func(int) int { return 1 }, (16<<20 - 64) / 6},
	} {
		c, err := tc.dec(tc.header(MaxExtFields))
		if err != nil || len(c.ExtFields) != tc.fields(MaxExtFields) {
			t.Fatalf("%s: %d ext fields: %v, %d decoded", tc.name, MaxExtFields, err, len(c.ExtFields))
		}
		if _, err := tc.dec(tc.header(MaxExtFields + 1)); !errors.Is(err, ErrHeaderLimit) {
			t.Fatalf("%s: %d ext fields: %v, want ErrHeaderLimit", tc.name, MaxExtFields+1, err)
		}
		// The hostile frame: a header of about 16 MiB, all ext fields,
		// refused before the header is copied or a map made.
		huge := tc.header(tc.huge)
		per := checkHeaderAllocs(t, tc.dec, huge)
		t.Logf("%s: %d-byte header of minimal ext fields: %.2f bytes allocated per byte", tc.name, len(huge), per)
	}
}

func TestJSONHeaderKeysBounded(t *testing.T) {
	// A repeated extFields key counts all its fields together.
	var b []byte
	b = append(b, '{')
	for range 2 {
		b = append(b, `"extFields":`...)
		b = append(b, jsonHeaderWithExt(MaxExtFields/2 + 1)[len(`{"code":10,"extFields":`):]...)
		b[len(b)-1] = ','
	}
	b = append(b[:len(b)-1], '}')
	if _, err := decodeJSONHeader(b, nil); !errors.Is(err, ErrHeaderLimit) {
		t.Fatalf("two extFields of %d fields: %v, want ErrHeaderLimit", MaxExtFields/2+1, err)
	}
	keys := func(n int) []byte {
		b := []byte{'{'}
		for i := range n {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `"code":70000`...) // each a per-key error kept until replaced
		}
		return append(b, '}')
	}
	if _, err := decodeJSONHeader(keys(maxJSONHeaderKeys), nil); err == nil || errors.Is(err, ErrHeaderLimit) {
		t.Fatalf("%d keys: %v, want the bad code", maxJSONHeaderKeys, err)
	}
	if _, err := decodeJSONHeader(keys(maxJSONHeaderKeys+1), nil); !errors.Is(err, ErrHeaderLimit) {
		t.Fatalf("%d keys: %v, want ErrHeaderLimit", maxJSONHeaderKeys+1, err)
	}
	checkHeaderAllocs(t, func(b []byte) (*Command, error) { return decodeJSONHeader(b, nil) }, keys(1<<20))
}

// The official clients' headers stay far below the limits: the largest
// RocketMQ request header (a send, with every RocketMQ 5 RPC field and the
// ACL fields) decodes.
func TestLargestClientHeaderDecodes(t *testing.T) {
	ext := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n",
		"ns", "nsd", "bname", "oway", "lo", "AccessKey", "Signature", "SecurityToken"} {
		ext[k] = "v"
	}
	for _, st := range []byte{SerializeJSON, SerializeRocketMQ} {
		fr, err := EncodeFrame(nil, &Command{Code: ReqSendMessageV2, ExtFields: ext, SerializeType: st})
		if err != nil {
			t.Fatal(err)
		}
		if c, err := DecodeFrame(fr); err != nil || len(c.ExtFields) != len(ext) {
			t.Fatalf("type %d: %v", st, err)
		}
	}
}

// A header above precountHeaderBytes is counted before it is copied: one
// within the limits decodes as any other (fields of unknown keys' objects
// do not count), one over them is refused without the copy.
func TestLargeHeaderCountedFirst(t *testing.T) {
	props := strings.Repeat("KEYS\x01k\x02", (precountHeaderBytes/8)+100)
	c := &Command{Code: ReqSendMessage, ExtFields: map[string]string{"topic": "T", "properties": props}}
	fr, err := EncodeFrame(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeFrame(fr); err != nil || got.Ext("properties") != props {
		t.Fatalf("a %d-byte header: %v", len(fr), err)
	}
	other := jsonHeaderWithExt(2 * MaxExtFields)
	b := append([]byte(`{"other":`), other[len(`{"code":10,"extFields":`):len(other)-1]...)
	b = append(b, `,"extFields":{"a":"1"},"pad":"`...)
	b = append(b, strings.Repeat("x", precountHeaderBytes)...)
	b = append(b, `"}`...)
	if got, err := decodeJSONHeader(b, nil); err != nil || len(got.ExtFields) != 1 {
		t.Fatalf("an unknown key's object of %d fields: %v", 2*MaxExtFields, err)
	}
	huge := jsonHeaderWithExt(precountHeaderBytes)
	if n := allocatedBytes(func() { decodeJSONHeader(huge, nil) }); n > 4<<10 {
		t.Fatalf("a %d-byte header over the limit allocated %d bytes", len(huge), n)
	}
}
