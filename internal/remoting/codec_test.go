package remoting

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"

	jsoniter "github.com/json-iterator/go"
)

// goClientRequestHeader is the exact JSON header the official Go client
// sends for a request (rocketmq-remoting.md 1.3).
const goClientRequestHeader = `{"code":11,"language":"GO","version":317,"opaque":1,"flag":0,"remark":"","extFields":{"consumerGroup":"cg"}}`

func TestEncodeGoldenGoRequest(t *testing.T) {
	c := &Command{Code: 11, Language: "GO", Version: 317, Opaque: 1,
		ExtFields: map[string]string{"consumerGroup": "cg"}}
	got, err := EncodeFrame(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	want := frameBytes(0, []byte(goClientRequestHeader), nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("frame\n got %q\nwant %q", got, want)
	}
	back, err := DecodeFrame(got)
	if err != nil {
		t.Fatal(err)
	}
	if back.Code != 11 || back.Language != "GO" || back.Version != 317 || back.Opaque != 1 ||
		back.Ext("consumerGroup") != "cg" || back.Body != nil {
		t.Fatalf("decoded %v", back)
	}
}

// frameBytes builds a frame by hand, independently of EncodeFrame.
func frameBytes(serType byte, header, body []byte) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(header)+len(body)))
	b = binary.BigEndian.AppendUint32(b, uint32(serType)<<24|uint32(len(header)))
	b = append(b, header...)
	return append(b, body...)
}

func sampleCommands() []*Command {
	props := "KEYS\x01k1 k2\x02TAGS\x01TagA\x02UNIQ_KEY\x01AC11000100002A9F\x02"
	return []*Command{
		{Code: 0, Language: "JAVA", Version: 401, Opaque: -7, Flag: FlagResponse},
		{Code: ReqSendMessage, Language: "GO", Version: 317, Opaque: 1 << 30, Flag: 0,
			Remark: "quote\" backslash\\ nl\n tab\t ctl\x01 unicode é 日本 \U0001F600",
			ExtFields: map[string]string{
				"producerGroup": "pg", "topic": "T", "queueId": "3", "properties": props,
				"": "empty key", "emptyValue": "", "weird\"key": "v\\",
			},
			Body: []byte("hello body\x00\xff")},
		{Code: -1, Language: "RUST", Version: -32768, Opaque: -1 << 31, Flag: 3,
			ExtFields: map[string]string{}},
	}
}

func TestRoundTripBothSerializeTypes(t *testing.T) {
	for _, st := range []byte{SerializeJSON, SerializeRocketMQ} {
		for i, c := range sampleCommands() {
			c.SerializeType = st
			frame, err := EncodeFrame(nil, c)
			if err != nil {
				t.Fatalf("type %d #%d: encode: %v", st, i, err)
			}
			got, err := DecodeFrame(frame)
			if err != nil {
				t.Fatalf("type %d #%d: decode: %v", st, i, err)
			}
			assertSameCommand(t, c, got)
		}
	}
}

func assertSameCommand(t *testing.T, want, got *Command) {
	t.Helper()
	if got.Code != want.Code || got.Language != want.Language || got.Version != want.Version ||
		got.Opaque != want.Opaque || got.Flag != want.Flag || got.Remark != want.Remark ||
		got.SerializeType != want.SerializeType || !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("decoded\n got %+v\nwant %+v", got, want)
	}
	if len(got.ExtFields) != len(want.ExtFields) || !maps.Equal(got.ExtFields, want.ExtFields) {
		t.Fatalf("ext\n got %q\nwant %q", got.ExtFields, want.ExtFields)
	}
}

func TestJSONHeaderIsValidForGoClientDecoder(t *testing.T) {
	// The Go client decodes headers with jsoniter into typed fields; a
	// non-string ext value or an out-of-range code drops the frame.
	type goClientHeader struct {
		Code      int16             `json:"code"`
		Language  string            `json:"language"`
		Version   int16             `json:"version"`
		Opaque    int32             `json:"opaque"`
		Flag      int32             `json:"flag"`
		Remark    string            `json:"remark"`
		ExtFields map[string]string `json:"extFields"`
	}
	for _, c := range sampleCommands() {
		hdr := appendJSONHeader(nil, c)
		var h goClientHeader
		if err := jsoniter.Unmarshal(hdr, &h); err != nil {
			t.Fatalf("jsoniter rejects %s: %v", hdr, err)
		}
		if h.Code != c.Code || h.Opaque != c.Opaque || h.Remark != c.Remark || !maps.Equal(h.ExtFields, c.ExtFields) {
			t.Fatalf("jsoniter decoded %+v from %s", h, hdr)
		}
	}
}

func TestDecodeJavaStyleJSON(t *testing.T) {
	hdr := `{"code":0,"extFields":{"queueId":"1","msgId":"0A0000010000"},"flag":1,"language":"JAVA",` +
		`"opaque":5,"serializeTypeCurrentRPC":"JSON","version":479}`
	c, err := DecodeFrame(frameBytes(0, []byte(hdr), []byte("b")))
	if err != nil {
		t.Fatal(err)
	}
	want := &Command{Code: 0, Language: "JAVA", Version: 479, Opaque: 5, Flag: 1,
		ExtFields: map[string]string{"queueId": "1", "msgId": "0A0000010000"}, Body: []byte("b")}
	assertSameCommand(t, want, c)
	if !c.IsResponse() || c.IsOneway() {
		t.Fatal("flag bits")
	}
}

func TestDecodeTolerantJSON(t *testing.T) {
	cases := []struct {
		hdr  string
		want Command
	}{
		{`{"code":34,"language":9,"remark":null,"extFields":{"a":5,"b":true,"c":-1.5e3,"d":null,"e":"x"}}`,
			Command{Code: 34, Language: "GO", ExtFields: map[string]string{"a": "5", "b": "true", "c": "-1.5e3", "e": "x"}}},
		{` { "code" : 1 , "language" : 200 , "extFields" : null } `, Command{Code: 1, Language: "OTHER"}},
		{`{"code":2,"extFields":{"o":{"x":[1,{"y":2}]},"s":"\u00e9\ud83d\ude00\ud800\/"}}`,
			Command{Code: 2, ExtFields: map[string]string{"o": `{"x":[1,{"y":2}]}`, "s": "é\U0001F600\uFFFD/"}}},
		{`{"unknown":{"deep":[[[]]]},"code":3,"flag":2,"opaque":null}`, Command{Code: 3, Flag: 2}},
		{`{"code":4,"remark":12}`, Command{Code: 4, Remark: "12"}},
		// A key given twice takes its last value, even when an earlier
		// one was unusable (found by FuzzDecodeJSONHeader).
		{`{"code":70000,"code":0}`, Command{}},
		{`{"code":"1","flag":[2],"flag":3,"code":5}`, Command{Code: 5, Flag: 3}},
		{`{"language":{},"extFields":["a"],"language":"GO","extFields":{"a":"b"}}`,
			Command{Language: "GO", ExtFields: map[string]string{"a": "b"}}},
	}
	for _, tc := range cases {
		c, err := decodeJSONHeader([]byte(tc.hdr), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.hdr, err)
		}
		tc.want.SerializeType = SerializeJSON
		assertSameCommand(t, &tc.want, c)
	}
}

// TestDecodeJSONExtFieldOrder: a later value or null for the same key wins,
// whether the fields fit the decoder's stack buffer or spill past it.
func TestDecodeJSONExtFieldOrder(t *testing.T) {
	for _, n := range []int{1, maxStackExtFields - 1, maxStackExtFields, maxStackExtFields + 1, 3 * maxStackExtFields} {
		var hdr strings.Builder
		want := make(map[string]string)
		hdr.WriteString(`{"code":1,"extFields":{`)
		for i := range n {
			k := fmt.Sprintf("k%d", i)
			fmt.Fprintf(&hdr, `"%s":"v%d",`, k, i)
			want[k] = fmt.Sprintf("v%d", i)
		}
		// Override the first field, remove the second, re-add the third
		// after removing it: all after the n-th field.
		hdr.WriteString(`"k0":"again","k1":null,"k2":null,"k2":"back","late":"x"}}`)
		want["k0"], want["k2"], want["late"] = "again", "back", "x"
		delete(want, "k1")
		c, err := decodeJSONHeader([]byte(hdr.String()), nil)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if !maps.Equal(c.ExtFields, want) {
			t.Fatalf("n=%d: ext fields %v, want %v", n, c.ExtFields, want)
		}
	}
}

func TestDecodeJSONRejects(t *testing.T) {
	for _, hdr := range []string{
		``, `[]`, `{`, `{"code":40000}`, `{"version":-40000}`, `{"opaque":2147483648}`,
		`{"code":1.5}`, `{"code":"1"}`, `{"code":01}`, `{"remark":"unterminated}`,
		`{"extFields":{"a":"b"}`, `{"extFields":["a"]}`, `{"code":1}x`, `{"a":"\x01"}`,
		`{"a":"\q"}`, `{"a":"\u12"}`, `{"a":tru}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`,
		`{"code":1,}`, `{,}`, `{"a" 1}`, `{"language":{}}`,
		`{"code":1,"code":70000}`, `{"extFields":{},"extFields":1}`, `{"code":70000,"code":0,"flag":"x"}`,
		`{"code":70000,"code":}`,
		strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100),
	} {
		if c, err := decodeJSONHeader([]byte(hdr), nil); err == nil {
			t.Errorf("%q: accepted as %+v", hdr, c)
		} else if !errors.Is(err, ErrBadHeader) {
			t.Errorf("%q: error %v is not ErrBadHeader", hdr, err)
		}
	}
}

func TestDecodeBinaryRejects(t *testing.T) {
	good, err := appendBinaryHeader(nil, &Command{Code: 1, Remark: "r", ExtFields: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeBinaryHeader(good); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(good); n++ {
		if _, err := decodeBinaryHeader(good[:n]); !errors.Is(err, ErrBadHeader) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	if _, err := decodeBinaryHeader(append(good, 0)); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("trailing byte: %v", err)
	}
	huge := bytes.Clone(good)
	binary.BigEndian.PutUint32(huge[13:], 0x7fffffff) // remark length
	if _, err := decodeBinaryHeader(huge); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("huge remark: %v", err)
	}
	binary.BigEndian.PutUint32(huge[13:], 0xffffffff) // negative
	if _, err := decodeBinaryHeader(huge); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("negative remark: %v", err)
	}
}

func TestDecodeFrameRejects(t *testing.T) {
	for _, f := range [][]byte{
		nil, {0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 1, 0},
		frameBytes(2, []byte("{}"), nil),
		append(frameBytes(0, []byte("{}"), nil), 'x'),
		{0, 0, 0, 4, 0, 0, 0, 9}, // header length beyond frame
	} {
		if _, err := DecodeFrame(f); err == nil {
			t.Errorf("%q accepted", f)
		}
	}
}

func TestReadPayloadLimits(t *testing.T) {
	// Over the limit: refused from the length field alone.
	over := binary.BigEndian.AppendUint32(nil, 1025)
	if _, err := readPayload(bytes.NewReader(over), 1024); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("over limit: %v", err)
	}
	neg := []byte{0x80, 0, 0, 0}
	if _, err := readPayload(bytes.NewReader(neg), DefaultMaxFrameBytes); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("negative length: %v", err)
	}
	// A 16 MiB claim followed by 3 bytes must not allocate 16 MiB.
	claim := append(binary.BigEndian.AppendUint32(nil, DefaultMaxFrameBytes), 1, 2, 3)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readPayload(bytes.NewReader(claim), DefaultMaxFrameBytes)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short frame: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes for a 3-byte frame", grew)
	}
	// A full frame arriving in small pieces is read whole.
	frame, _ := EncodeFrame(nil, &Command{Code: 1, Body: bytes.Repeat([]byte("x"), 300_000)})
	p, err := readPayload(io.MultiReader(bytes.NewReader(frame[:5]), bytes.NewReader(frame[5:])), DefaultMaxFrameBytes)
	if err != nil || !bytes.Equal(p, frame[4:]) {
		t.Fatalf("piecewise read: %v", err)
	}
}

// TestReadFrameHTTPAnswer: an HTTP server's answer where a frame belongs
// is named as such, not as a frame of 1.2 GB.
func TestReadFrameHTTPAnswer(t *testing.T) {
	answer := []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
	_, err := readPayload(bytes.NewReader(answer), DefaultMaxFrameBytes)
	if !errors.Is(err, ErrHTTPPeer) {
		t.Fatalf("HTTP answer: %v, want ErrHTTPPeer", err)
	}
}

// TestEncodeExtFieldsSorted: both header encodings write ext fields in
// sorted key order, below and above the insertion-sort size, so the bytes
// of a frame do not depend on map iteration order.
func TestEncodeExtFieldsSorted(t *testing.T) {
	for _, n := range []int{0, 1, 2, 13, insertionSortMax, insertionSortMax + 1, 3 * maxStackExtFields} {
		ext := make(map[string]string, n)
		for i := range n {
			ext[fmt.Sprintf("k%03d", (i*7919)%1000)] = fmt.Sprint(i)
		}
		var want strings.Builder
		keys := slices.Sorted(maps.Keys(ext))
		for i, k := range keys {
			if i > 0 {
				want.WriteByte(',')
			}
			fmt.Fprintf(&want, "%q:%q", k, ext[k])
		}
		c := &Command{Code: 1, ExtFields: ext}
		for range 3 { // a map iterates in a different order each time
			got := string(appendJSONHeader(nil, c))
			if wantJSON := `"extFields":{` + want.String() + "}}"; !strings.HasSuffix(got, wantJSON) {
				t.Fatalf("n=%d: JSON header %s does not end with %s", n, got, wantJSON)
			}
			bin, err := appendBinaryHeader(nil, c)
			if err != nil {
				t.Fatal(err)
			}
			var wantBin []byte
			for _, k := range keys {
				wantBin = binary.BigEndian.AppendUint16(wantBin, uint16(len(k)))
				wantBin = append(wantBin, k...)
				wantBin = binary.BigEndian.AppendUint32(wantBin, uint32(len(ext[k])))
				wantBin = append(wantBin, ext[k]...)
			}
			if !bytes.HasSuffix(bin, wantBin) {
				t.Fatalf("n=%d: binary ext fields not in sorted order", n)
			}
		}
	}
}

// goClientSendHeader is a SEND_MESSAGE_V2 header as the official Go client
// writes it (13 ext fields, past the 8 a map holds in one group).
const goClientSendHeader = `{"code":310,"language":"GO","version":317,"opaque":7,"flag":0,"remark":"","extFields":` +
	`{"a":"pg","b":"TopicTest","c":"TBW102","d":"4","e":"3","f":"0","g":"1764633600000","h":"0",` +
	`"i":"UNIQ_KEY\u00017F0000010000000000000001\u0002WAIT\u0001true\u0002","j":"0","k":"false","l":"0","m":"false"}}`

// TestListedExtCostsOneAllocation: a request whose code the handler lists
// decodes its ext fields into one list where the map takes four or more
// allocations, and reads the same through the accessors. (Both also make
// the command, the header copy and, for the escaped properties value, its
// decoding buffer and string.)
func TestListedExtCostsOneAllocation(t *testing.T) {
	hdr := []byte(goClientSendHeader)
	mapped, err := decodeJSONHeader(hdr, nil)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := decodeJSONHeader(hdr, listAll{})
	if err != nil {
		t.Fatal(err)
	}
	if listed.ExtFields != nil || len(listed.ext) != 13 || len(mapped.ExtFields) != 13 {
		t.Fatalf("listed: map %v, list of %d; mapped: %d fields", listed.ExtFields, len(listed.ext), len(mapped.ExtFields))
	}
	for k, v := range mapped.ExtFields {
		if got, ok := listed.LookupExt(k); !ok || got != v {
			t.Fatalf("%s: listed %q %v, mapped %q", k, got, ok, v)
		}
	}
	if n, err := listed.ExtInt64("g"); err != nil || n != 1764633600000 {
		t.Fatalf("ExtInt64(g) = %d, %v", n, err)
	}
	listedAllocs := testing.AllocsPerRun(100, func() { decodeJSONHeader(hdr, listAll{}) })
	mapAllocs := testing.AllocsPerRun(100, func() { decodeJSONHeader(hdr, nil) })
	if listedAllocs > 5 || mapAllocs < listedAllocs+3 {
		t.Fatalf("allocations per decode: listed %.0f (want at most 5), map %.0f", listedAllocs, mapAllocs)
	}
	t.Logf("allocations per decode: listed %.0f, map %.0f", listedAllocs, mapAllocs)
}

// TestSetExtOnListedRequest: SetExt on a listed request keeps its fields.
func TestSetExtOnListedRequest(t *testing.T) {
	c, err := decodeJSONHeader([]byte(goClientSendHeader), listAll{})
	if err != nil {
		t.Fatal(err)
	}
	c.SetExt("z", "1")
	if c.ext != nil || len(c.ExtFields) != 14 || c.Ext("b") != "TopicTest" || c.Ext("z") != "1" {
		t.Fatalf("after SetExt: list %v, map %v", c.ext, c.ExtFields)
	}
}

// TestListedExtManyFields: a listed request with more ext fields than the
// decoder collects on its stack gets a map (also when duplicates leave
// fewer), and reads the same either way.
func TestListedExtManyFields(t *testing.T) {
	b := []byte(`{"code":310,"extFields":{`)
	for i := range maxStackExtFields + 1 {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `"k%d":"v%d"`, i%(maxStackExtFields-1), i)
	}
	b = append(b, "}}"...)
	c, err := decodeJSONHeader(b, listAll{})
	if err != nil {
		t.Fatal(err)
	}
	if c.ext != nil || len(c.ExtFields) != maxStackExtFields-1 || c.Ext("k0") != fmt.Sprint("v", maxStackExtFields-1) {
		t.Fatalf("list %v, map %v", c.ext, c.ExtFields)
	}
}

// The ext fields as a list are those of the map (later values and nulls
// overriding earlier ones) for keys that share a keyClass, repeat, or are
// removed and set again; an escaped value decodes as the map's does.
func TestExtListResolvesLikeMap(t *testing.T) {
	if keyClass("ab") != keyClass("ab") || keyClass("ac") == keyClass("ab") {
		t.Fatal("keyClass")
	}
	// "a" and "!" share a class (last bytes 97 and 33, 64 apart).
	if keyClass("a") != keyClass("!") {
		t.Fatalf("the test needs keys of one class: %d %d", keyClass("a"), keyClass("!"))
	}
	headers := []string{
		`{"code":10,"extFields":{"a":"1","!":"2","p":"3","!":"4"}}`,
		`{"code":10,"extFields":{"a":"1","!":null,"p":"3","!":"5","a":null}}`,
		`{"code":10,"extFields":{"!":null,"p":"3","a":"x","q":"y","p":null,"p":"z","!":"w"}}`,
		`{"code":10,"extFields":{"properties":"KEYS\u0001k1\u0002UNIQ_KEY\u0001U1\u0002","topic":"T","topic":"T2"}}`,
	}
	for _, h := range headers {
		m, err := decodeJSONHeader([]byte(h), nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := decodeJSONHeader([]byte(h), listAll{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		l.RangeExt(func(k, v string) {
			if _, dup := got[k]; dup {
				t.Fatalf("%s: key %q listed twice", h, k)
			}
			got[k] = v
		})
		if !maps.Equal(got, m.ExtFields) {
			t.Fatalf("%s: as a list %v, as a map %v", h, got, m.ExtFields)
		}
	}
}

// A response built with AddExt keeps its fields as a list and encodes to
// the bytes of the same fields in the map; a key set again is replaced,
// SetExt afterwards moves them all to the map, and AddExt on a command
// with the map sets it there.
func TestAddExtEncodesAsTheMap(t *testing.T) {
	req := &Command{Code: ReqSendMessage, Opaque: 9}
	l := req.NewResponse(ResSuccess, "")
	l.AddExt("queueOffset", "1")
	l.AddExt("msgId", "ID")
	l.AddExt("queueOffset", "2")
	l.AddExt("TRACE_ON", "true")
	if l.ExtFields != nil || len(l.ext) != 3 {
		t.Fatalf("map %v, list %v", l.ExtFields, l.ext)
	}
	if v, ok := l.LookupExt("queueOffset"); !ok || v != "2" || l.Ext("msgId") != "ID" {
		t.Fatalf("queueOffset %q %v, msgId %q", v, ok, l.Ext("msgId"))
	}
	m := req.NewResponse(ResSuccess, "")
	m.ExtFields = map[string]string{"queueOffset": "2", "msgId": "ID", "TRACE_ON": "true"}
	for _, st := range []byte{SerializeJSON, SerializeRocketMQ} {
		l.SerializeType, m.SerializeType = st, st
		lf, err := EncodeFrame(nil, l)
		if err != nil {
			t.Fatal(err)
		}
		mf, err := EncodeFrame(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(lf, mf) {
			t.Fatalf("serialize type %d: from the list %q, from the map %q", st, lf, mf)
		}
	}
	l.SetExt("x", "y")
	if l.ext != nil || len(l.ExtFields) != 4 || l.ExtFields["queueOffset"] != "2" {
		t.Fatalf("after SetExt: map %v, list %v", l.ExtFields, l.ext)
	}
	l.AddExt("z", "w")
	if l.ext != nil || l.ExtFields["z"] != "w" {
		t.Fatalf("AddExt on the map: map %v, list %v", l.ExtFields, l.ext)
	}
}
