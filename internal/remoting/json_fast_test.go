package remoting

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goClientSendV2Header is a SEND_MESSAGE_V2 header as the official Go
// client writes it (jsoniter: its properties' separators escaped).
const goClientSendV2Header = `{"code":310,"language":"GO","version":317,"opaque":42,"flag":0,"remark":"",` +
	`"extFields":{"a":"ProducerGroupName","b":"TopicTest","c":"TBW102","d":"4","e":"2","f":"0","g":"1719990000123",` +
	`"h":"0","i":"KEYS\u0001order-1234\u0002TAGS\u0001TagA\u0002UNIQ_KEY\u00017F0000010A8C18B4AAC2617A3C9A0000\u0002WAIT\u0001true\u0002",` +
	`"j":"0","k":"false","l":"16","m":"false","n":"broker-a"}}`

// javaPullHeader is a PULL_MESSAGE header as the Java client writes it
// (fastjson: keys sorted, no remark, serializeTypeCurrentRPC).
const javaPullHeader = `{"code":11,"extFields":{"commitOffset":"0","consumerGroup":"cg","expressionType":"TAG",` +
	`"maxMsgNums":"32","queueId":"1","queueOffset":"100","subVersion":"1719990000000","suspendTimeoutMillis":"15000",` +
	`"sysFlag":"3","topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":9,"serializeTypeCurrentRPC":"JSON","version":453}`

// checkFastAgrees decodes data with the fast decoder and, when it takes
// the header, with the general walk too: both with and without a list of
// ext fields, the two commands must be equal. It reports whether the fast
// decoder took the header.
func checkFastAgrees(t testing.TB, data []byte) bool {
	t.Helper()
	took := false
	for _, lister := range []ExtLister{nil, listAll{}} {
		fc, ok := fastJSONHeader(data, lister)
		if !ok {
			if fc != nil {
				t.Fatalf("%q: declined, yet returned %+v", data, fc)
			}
			continue
		}
		took = true
		wc, err := decodeJSONHeaderWalk(data, lister)
		if err != nil {
			t.Fatalf("%q: the fast decoder took it, the walk fails: %v", data, err)
		}
		if d := commandDiff(fc, wc); d != "" {
			t.Fatalf("%q (listed %v): fast and walk differ: %s", data, lister != nil, d)
		}
	}
	return took
}

// commandDiff names the first header field in which a and b differ.
func commandDiff(a, b *Command) string {
	switch {
	case a.Code != b.Code, a.Version != b.Version, a.Opaque != b.Opaque, a.Flag != b.Flag:
		return fmt.Sprintf("code/version/opaque/flag %d/%d/%d/%d vs %d/%d/%d/%d",
			a.Code, a.Version, a.Opaque, a.Flag, b.Code, b.Version, b.Opaque, b.Flag)
	case a.Language != b.Language:
		return fmt.Sprintf("language %q vs %q", a.Language, b.Language)
	case a.Remark != b.Remark:
		return fmt.Sprintf("remark %q vs %q", a.Remark, b.Remark)
	case a.SerializeType != b.SerializeType:
		return "serialize type"
	case (a.ExtFields == nil) != (b.ExtFields == nil) || !maps.Equal(a.ExtFields, b.ExtFields):
		return fmt.Sprintf("ExtFields %v vs %v", a.ExtFields, b.ExtFields)
	case (a.ext == nil) != (b.ext == nil) || !slices.Equal(a.ext, b.ext):
		return fmt.Sprintf("listed ext %v vs %v", a.ext, b.ext)
	case a.Body != nil || b.Body != nil || a.frame != nil || b.frame != nil:
		return "a body"
	}
	return ""
}

// TestFastJSONHeaderTakesClientHeaders: the headers the clients send are
// decoded by the fast decoder, with the walk's result.
func TestFastJSONHeaderTakesClientHeaders(t *testing.T) {
	for _, h := range []string{goClientSendV2Header, javaPullHeader, goClientRequestHeader,
		`{"code":0,"extFields":{"queueId":"1"},"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":479}`,
	} {
		if !checkFastAgrees(t, []byte(h)) {
			t.Errorf("the fast decoder declined %s", h)
		}
	}
	c, err := decodeJSONHeader([]byte(goClientSendV2Header), listAll{})
	if err != nil {
		t.Fatal(err)
	}
	if n, listed := c.ListedExts(); !listed || n != 14 || c.Ext("i") != "KEYS\x01order-1234\x02TAGS\x01TagA\x02UNIQ_KEY\x017F0000010A8C18B4AAC2617A3C9A0000\x02WAIT\x01true\x02" {
		t.Fatalf("decoded %v", c)
	}
}

// TestFastJSONHeaderDeclines: headers outside the fast decoder's shape are
// left to the walk (and decode as before).
func TestFastJSONHeaderDeclines(t *testing.T) {
	for _, h := range []string{
		` {"code":1}`, `{} `, `{}0`, `{"code" :1}`, `{"code":1} `, `{"code":1,"code":2}`, `{"code":01}`, `{"code":1.0}`,
		`{"code":1e2}`, `{"code":40000}`, `{"code":-}`, `{"code":null}`, `{"language":9}`,
		`{"extFields":{"a":"1","a":"2"}}`, `{"extFields":{"a":1}}`, `{"extFields":{"a":null}}`,
		`{"extFields":{"k\u0065y":"v"}}`, `{"extFields":{}, "code":1}`, `{"x":true}`, `{"x":{}}`,
		`{"remark":5}`, `{"code":1,}`, `null`, `{"code":1`, `{"extFields":{"a":"b}}`,
		`{"opaque":12345678901234567890}`, `{"flag":2147483648}`,
		string(jsonHeaderWithExt(maxStackExtFields + 1)),
	} {
		if _, ok := fastJSONHeader([]byte(h), nil); ok {
			t.Errorf("the fast decoder took %s", h)
		}
		if _, ok := fastJSONHeader([]byte(h), listAll{}); ok {
			t.Errorf("the fast decoder took %s (listed)", h)
		}
	}
}

// TestFastJSONHeaderAgrees compares the fast decoder with the walk on
// encoded commands of random fields, on every prefix and on single-byte
// changes of them, and on the fuzz seeds.
func TestFastJSONHeaderAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "Z", "0", "9", "-", " ", "\"", "\\", "/", "\x00", "\x01", "\x1f", "\x7f",
		"é", "日本", "\U0001F600", "\xff", "\xc3", "null", "{", "}", ":", ","}
	str := func(max int) string {
		var b strings.Builder
		for range r.IntN(max + 1) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	var inputs [][]byte
	for _, s := range jsonSeeds() {
		inputs = append(inputs, []byte(s))
	}
	for _, s := range []string{goClientSendV2Header, javaPullHeader} {
		inputs = append(inputs, []byte(s))
	}
	seeds, _ := filepath.Glob("testdata/fuzz/FuzzDecodeJSONHeader/*")
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			inputs = append(inputs, b)
		}
	}
	for i := range 400 {
		c := &Command{Code: int16(r.IntN(1 << 16)), Version: int16(r.IntN(1 << 16)), Opaque: int32(r.Uint32()),
			Flag: int32(r.IntN(4)), Language: []string{"GO", "JAVA", "", str(4)}[i%4]}
		if i%3 != 0 {
			c.Remark = str(6)
		}
		if i%5 != 0 {
			c.ExtFields = map[string]string{}
			for range r.IntN(40) {
				k := str(3)
				if i%2 == 0 {
					k = string(rune('a' + r.IntN(14)))
				}
				c.ExtFields[k] = str(8)
			}
		}
		frame, err := EncodeFrame(nil, c)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, frame[8:])
	}
	took, tried := 0, 0
	for _, in := range inputs {
		variants := [][]byte{in}
		for j := 0; j < len(in); j += 1 + len(in)/16 {
			variants = append(variants, in[:j])
			changed := bytes.Clone(in)
			changed[j] = alphabet[r.IntN(len(alphabet))][0]
			variants = append(variants, changed)
			variants = append(variants, append(bytes.Clone(in[:j]), in[j+1:]...))
		}
		for _, v := range variants {
			tried++
			if checkFastAgrees(t, v) {
				took++
			}
		}
	}
	// The comparison means something only if many inputs took the fast path.
	if took < len(inputs)/2 {
		t.Fatalf("the fast decoder took only %d of %d inputs", took, tried)
	}
	t.Logf("the fast decoder took %d of %d inputs", took, tried)
}

// FuzzFastJSONHeader: whatever the fast decoder takes, the walk decodes
// to the same command.
func FuzzFastJSONHeader(f *testing.F) {
	for _, s := range jsonSeeds() {
		f.Add([]byte(s))
	}
	f.Add([]byte(goClientSendV2Header))
	f.Add([]byte(javaPullHeader))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastAgrees(t, data)
	})
}

// TestDecodeGoSendHeaderAllocs: the Go client's send header, decoded with
// its ext fields listed, costs the command (its list in the same
// allocation), the header's copy and the unescaped properties.
func TestDecodeGoSendHeaderAllocs(t *testing.T) {
	data := []byte(goClientSendV2Header)
	n := testing.AllocsPerRun(100, func() {
		if _, err := decodeJSONHeader(data, listAll{}); err != nil {
			t.Fatal(err)
		}
	})
	if n > 3 {
		t.Fatalf("%.0f allocations per decode, want at most 3", n)
	}
}

// sendResponseAsBrokerMakes is a send's response made as the broker makes
// it (in a ResponseBuf, fields added in the broker's order).
func sendResponseAsBrokerMakes(buf *ResponseBuf) *Command {
	req := &Command{Code: ReqSendMessageV2, Language: "GO", Version: 317, Opaque: 123456}
	resp := req.NewResponseIn(buf, ResSuccess, "")
	resp.AddExt("msgId", "7F00000100002A9F00000000000BEEF0")
	resp.AddExt("queueOffset", "987654")
	resp.AddExt("queueId", "2")
	resp.AddExt("transactionId", "7F0000010A8C18B4AAC2617A3C9A0000")
	resp.AddExt("MSG_REGION", "DefaultRegion")
	resp.AddExt("TRACE_ON", "true")
	return resp
}

// TestEncodeGoldenSendResponse pins the bytes of a send's response.
func TestEncodeGoldenSendResponse(t *testing.T) {
	var buf ResponseBuf
	got, err := EncodeFrame(nil, sendResponseAsBrokerMakes(&buf))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"code":0,"language":"JAVA","version":401,"opaque":123456,"flag":1,"remark":"","extFields":{` +
		`"MSG_REGION":"DefaultRegion","TRACE_ON":"true","msgId":"7F00000100002A9F00000000000BEEF0","queueId":"2",` +
		`"queueOffset":"987654","transactionId":"7F0000010A8C18B4AAC2617A3C9A0000"}}`
	if string(got[8:]) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", got[8:], want)
	}
}

func BenchmarkEncodeSendResponseAsBroker(b *testing.B) {
	var rb ResponseBuf
	c := sendResponseAsBrokerMakes(&rb)
	buf, _ := EncodeFrame(nil, c)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = EncodeFrame(buf[:0], c)
	}
}

// BenchmarkDecodeGoSendHeaderV2 decodes the official Go client's send
// header (its properties escaped) as the broker does (ExtLister).
func BenchmarkDecodeGoSendHeaderV2(b *testing.B) {
	data := []byte(goClientSendV2Header)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeJSONHeader(data, listAll{}); err != nil {
			b.Fatal(err)
		}
	}
}
