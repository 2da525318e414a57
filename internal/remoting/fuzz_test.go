package remoting

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// referenceDecodeJSON is a slow decoder built on encoding/json that states
// the intended semantics of decodeJSONHeader; the fuzz target compares the
// two.
func referenceDecodeJSON(data []byte) (*Command, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	if fields == nil {
		return nil, errors.New("header is null")
	}
	c := &Command{SerializeType: SerializeJSON}
	ints := []struct {
		key string
		dst any
	}{{"code", &c.Code}, {"version", &c.Version}, {"opaque", &c.Opaque}, {"flag", &c.Flag}}
	for _, f := range ints {
		if raw, ok := fields[f.key]; ok {
			if err := json.Unmarshal(raw, f.dst); err != nil {
				return nil, err
			}
		}
	}
	if raw, ok := fields["language"]; ok {
		lang, err := referenceLanguage(raw)
		if err != nil {
			return nil, err
		}
		c.Language = lang
	}
	if raw, ok := fields["remark"]; ok {
		c.Remark, _ = referenceLoose(raw)
	}
	if raw, ok := fields["extFields"]; ok && string(raw) != "null" {
		var ext map[string]json.RawMessage
		if err := json.Unmarshal(raw, &ext); err != nil {
			return nil, err
		}
		c.ExtFields = make(map[string]string, len(ext))
		for k, v := range ext {
			if s, ok := referenceLoose(v); ok {
				c.ExtFields[k] = s
			}
		}
	}
	return c, nil
}

func referenceLanguage(raw json.RawMessage) (string, error) {
	switch {
	case string(raw) == "null":
		return "", nil
	case raw[0] == '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		v, err := strconv.ParseUint(string(raw), 10, 8)
		if err != nil {
			return languageOther, nil
		}
		return languageName(byte(v)), nil
	}
	return "", errors.New("bad language")
}

func referenceLoose(raw json.RawMessage) (string, bool) {
	switch {
	case string(raw) == "null":
		return "", false
	case raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, true
		}
	}
	return string(raw), true
}

func jsonSeeds() []string {
	return []string{
		goClientRequestHeader,
		`{"code":0,"extFields":{"queueId":"1"},"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":479}`,
		`{"code":34,"language":9,"remark":null,"extFields":{"a":5,"b":true,"c":-1.5e3,"d":null}}`,
		`{"code":2,"extFields":{"o":{"x":[1,{"y":2}]},"s":"\u00e9\ud83d\ude00\ud800\/\n"}}`,
		`{"CODE":1,"code":2,"code":3}`,
		"{\"remark\":\"\xff\xfe\",\"extFields\":{\"\xc3\":\"\x01\"}}",
		`{"code":40000}`, `{}`, `null`, ` {"a" : [ ] } `,
	}
}

// The decoding fuzz targets also fail an input that allocates more than
// the bound of checkHeaderAllocs (bytes per input byte, plus a constant).

func FuzzDecodeJSONHeader(f *testing.F) {
	for _, s := range jsonSeeds() {
		f.Add([]byte(s))
	}
	f.Add(jsonHeaderWithExt(MaxExtFields))
	f.Add(jsonHeaderWithExt(MaxExtFields + 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkHeaderAllocs(t, func(b []byte) (*Command, error) { return decodeJSONHeader(b, nil) }, data)
		checkHeaderAllocs(t, func(b []byte) (*Command, error) { return decodeJSONHeader(b, listAll{}) }, data)
		got, err := decodeJSONHeader(data, nil)
		checkPrecountAgrees(t, data, got, err)
		checkListAgrees(t, data, got, err)
		ref, refErr := referenceDecodeJSON(data)
		switch {
		case err == nil && refErr != nil:
			t.Fatalf("accepted %q, encoding/json says %v", data, refErr)
		case errors.Is(err, ErrHeaderLimit):
			// Over MaxExtFields or maxJSONHeaderKeys: encoding/json has no limit.
		case err != nil && refErr == nil && bytes.Count(data, []byte("{"))+bytes.Count(data, []byte("[")) <= maxJSONDepth:
			t.Fatalf("rejected %q (%v), encoding/json accepts", data, err)
		case err == nil:
			if got.Code != ref.Code || got.Language != ref.Language || got.Version != ref.Version ||
				got.Opaque != ref.Opaque || got.Flag != ref.Flag || got.Remark != ref.Remark ||
				!maps.Equal(got.ExtFields, ref.ExtFields) || (got.ExtFields == nil) != (ref.ExtFields == nil) {
				t.Fatalf("%q:\n got %+v\n ref %+v", data, got, ref)
			}
			checkReencode(t, got)
		}
	})
}

// listAll lists every request code: ext fields decode as a list.
type listAll struct{ Handler }

func (listAll) ListsExt(int16) bool { return true }

// checkListAgrees decodes data again with its ext fields as a list: the
// outcome, every field read through the accessors and the encoding are
// those of the map.
func checkListAgrees(t *testing.T, data []byte, c *Command, err error) {
	t.Helper()
	lc, lerr := decodeJSONHeader(data, listAll{})
	if (err == nil) != (lerr == nil) || errors.Is(err, ErrHeaderLimit) != errors.Is(lerr, ErrHeaderLimit) {
		t.Fatalf("%q: %v; as a list: %v", data, err, lerr)
	}
	if err != nil {
		return
	}
	if lc.ExtFields != nil && lc.ext != nil {
		t.Fatalf("%q: both a map and a list", data)
	}
	got := map[string]string{}
	lc.RangeExt(func(k, v string) { got[k] = v })
	if !maps.Equal(got, c.ExtFields) {
		t.Fatalf("%q: as a list %v, as a map %v", data, got, c.ExtFields)
	}
	for k, v := range c.ExtFields {
		if lv, ok := lc.LookupExt(k); !ok || lv != v || lc.Ext(k) != v {
			t.Fatalf("%q: LookupExt(%q) = %q, %v; the map has %q", data, k, lv, ok, v)
		}
	}
	if _, ok := lc.LookupExt("\x00absent"); ok {
		t.Fatalf("%q: an absent key was found", data)
	}
	mf, merr := EncodeFrame(nil, c)
	lf, lerr := EncodeFrame(nil, lc)
	if (merr == nil) != (lerr == nil) || !bytes.Equal(mf, lf) {
		t.Fatalf("%q: encoded from the list %q (%v), from the map %q (%v)", data, lf, lerr, mf, merr)
	}
}

// checkPrecountAgrees decodes data again behind enough spaces to take the
// path that counts a large header first: the outcome must be the same.
func checkPrecountAgrees(t *testing.T, data []byte, c *Command, err error) {
	t.Helper()
	padded := append(bytes.Repeat([]byte{' '}, precountHeaderBytes), data...)
	pc, perr := decodeJSONHeader(padded, nil)
	switch {
	case (err == nil) != (perr == nil) || errors.Is(err, ErrHeaderLimit) != errors.Is(perr, ErrHeaderLimit):
		t.Fatalf("%q: %v; counted first: %v", data, err, perr)
	case err == nil && (pc.Code != c.Code || pc.Remark != c.Remark || !maps.Equal(pc.ExtFields, c.ExtFields)):
		t.Fatalf("%q: counted first, decoded %+v, not %+v", data, pc, c)
	}
}

// checkReencode asserts that encoding is idempotent after one decode.
func checkReencode(t *testing.T, c *Command) {
	t.Helper()
	for _, st := range []byte{SerializeJSON, SerializeRocketMQ} {
		c.SerializeType = st
		first, err := EncodeFrame(nil, c)
		if err != nil {
			if errors.Is(err, ErrBadHeader) && st == SerializeRocketMQ {
				continue // ext key longer than int16 allows
			}
			t.Fatalf("encode %+v: %v", c, err)
		}
		back, err := DecodeFrame(first)
		if err != nil {
			t.Fatalf("decode own frame %q: %v", first, err)
		}
		again, err := EncodeFrame(nil, back)
		if err != nil {
			t.Fatal(err)
		}
		third, err := DecodeFrame(again)
		if err != nil {
			t.Fatal(err)
		}
		if last, _ := EncodeFrame(nil, third); !bytes.Equal(again, last) {
			t.Fatalf("encoding not stable:\n%q\n%q", again, last)
		}
	}
}

func FuzzDecodeBinaryHeader(f *testing.F) {
	for _, c := range sampleCommands() {
		h, err := appendBinaryHeader(nil, c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(h)
	}
	f.Add(make([]byte, binaryFixedBytes))
	f.Add(binaryHeaderWithExt(MaxExtFields + 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkHeaderAllocs(t, decodeBinaryHeader, data)
		c, err := decodeBinaryHeader(data)
		if err != nil {
			if !errors.Is(err, ErrBadHeader) && !errors.Is(err, ErrHeaderLimit) {
				t.Fatalf("error %v is not ErrBadHeader", err)
			}
			return
		}
		h, err := appendBinaryHeader(nil, c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeBinaryHeader(h)
		if err != nil {
			t.Fatalf("own header %q: %v", h, err)
		}
		if back.Code != c.Code || back.Opaque != c.Opaque || back.Flag != c.Flag || back.Version != c.Version ||
			back.Remark != c.Remark || back.Language != c.Language || !maps.Equal(back.ExtFields, c.ExtFields) {
			t.Fatalf("round trip\n got %+v\nwant %+v", back, c)
		}
		checkReencode(t, c)
	})
}

func FuzzDecodeFrame(f *testing.F) {
	for _, c := range sampleCommands() {
		for _, st := range []byte{SerializeJSON, SerializeRocketMQ} {
			c.SerializeType = st
			fr, err := EncodeFrame(nil, c)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(fr)
		}
	}
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 16
		p, err := readPayload(bytes.NewReader(data), limit)
		if err == nil && (len(p) > limit || len(p) > len(data)) {
			t.Fatalf("read %d bytes from %d", len(p), len(data))
		}
		checkHeaderAllocs(t, DecodeFrame, data)
		c, err := DecodeFrame(data)
		if err != nil {
			return
		}
		if len(c.Body) > len(data) {
			t.Fatal("body larger than frame")
		}
		checkReencode(t, c)
	})
}

// TestWriteSeedCorpus regenerates testdata/fuzz seed files from the seeds
// above when KEEL_WRITE_CORPUS=1; otherwise it does nothing.
func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("KEEL_WRITE_CORPUS") != "1" {
		t.Skip("set KEEL_WRITE_CORPUS=1 to regenerate")
	}
	write := func(target, name string, data []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range jsonSeeds() {
		write("FuzzDecodeJSONHeader", fmt.Sprintf("seed-%02d", i), []byte(s))
	}
	for i, c := range sampleCommands() {
		h, _ := appendBinaryHeader(nil, c)
		write("FuzzDecodeBinaryHeader", fmt.Sprintf("seed-%02d", i), h)
		for _, st := range []byte{SerializeJSON, SerializeRocketMQ} {
			c.SerializeType = st
			fr, _ := EncodeFrame(nil, c)
			write("FuzzDecodeFrame", fmt.Sprintf("seed-%02d-type%d", i, st), fr)
		}
	}
	write("FuzzDecodeFrame", "seed-huge-claim", []byte{0, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	write("FuzzDecodeFrame", "seed-bad-header-len", []byte{0, 0, 0, 4, 1, 0, 0, 9})
}
