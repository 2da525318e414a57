package kafka

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"testing/iotest"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// frameOf returns a whole request frame for r with correlation id corr.
func frameOf(r kmsg.Request, version int16, corr int32) []byte {
	r.SetVersion(version)
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("test"))
	return f.AppendRequest(nil, r, corr)
}

// TestDecodeRequestRoundTrip: what kmsg encodes as a client decodes to the
// same key, version, correlation id and client id, for every served key
// at its lowest and highest advertised version.
func TestDecodeRequestRoundTrip(t *testing.T) {
	for key, rng := range apis {
		for _, v := range []int16{rng.min, rng.max} {
			frame := frameOf(kmsg.RequestForKey(key), v, 77)
			req, err := decodeRequest(frame[4:])
			if err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(key), v, err)
			}
			if req.key != key || req.version != v || req.correlation != 77 || req.clientID != "test" || req.body == nil {
				t.Fatalf("%s v%d: decoded %+v", kmsg.NameForKey(key), v, req)
			}
		}
	}
}

// TestDecodeRequestRefusals: truncated headers and bodies are errors;
// unknown keys and versions outside the range are unsupported, not errors.
func TestDecodeRequestRefusals(t *testing.T) {
	good := frameOf(kmsg.NewPtrMetadataRequest(), 9, 1)[4:]
	for _, n := range []int{0, 5, 9, 12} {
		if _, err := decodeRequest(good[:n]); !errors.Is(err, ErrMalformed) {
			t.Errorf("%d bytes: %v, want ErrMalformed", n, err)
		}
	}
	for _, f := range [][]byte{
		frameOf(kmsg.NewPtrDescribeDelegationTokenRequest(), 1, 2)[4:], // not served
		frameOf(kmsg.NewPtrFetchRequest(), 13, 3)[4:],                  // above the range
		frameOf(kmsg.NewPtrApiVersionsRequest(), 4, 4)[4:],
	} {
		req, err := decodeRequest(f)
		if err != nil || !req.unsupported || req.body != nil {
			t.Errorf("key %d v%d: %+v %v, want unsupported", req.key, req.version, req, err)
		}
	}
}

// FuzzDecodeRequest: no input makes the decoder panic, and whatever it
// accepts can be answered. Seeds: testdata/fuzz/FuzzDecodeRequest.
func FuzzDecodeRequest(f *testing.F) {
	for key, rng := range apis {
		f.Add(frameOf(kmsg.RequestForKey(key), rng.max, 1)[4:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeRequest(b)
		if err != nil {
			return
		}
		if req.body != nil && req.body.Key() != req.key {
			t.Fatalf("key %d decoded as %d", req.key, req.body.Key())
		}
	})
}

// TestMalformedFramesCloseOnlyTheirConnection: an oversized frame and a
// body that does not parse each close their connection with nothing
// written, an unsupported ApiVersions gets the v0 answer with error 35,
// and the server keeps serving other connections.
func TestMalformedFramesCloseOnlyTheirConnection(t *testing.T) {
	n := startNode(t, nil)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", n.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	closed := func(c net.Conn, what string) {
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("%s: read %v, want EOF (connection closed)", what, err)
		}
		c.Close()
	}
	c := dial()
	c.Write(binary.BigEndian.AppendUint32(nil, 1<<30))
	closed(c, "1 GiB frame")
	c = dial()
	bad := frameOf(kmsg.NewPtrMetadataRequest(), 9, 1)
	bad = append(bad[:len(bad)-2], 0xff, 0xff) // a topic count past the end
	binary.BigEndian.PutUint32(bad, uint32(len(bad)-4))
	c.Write(bad)
	closed(c, "bad body")

	c = dial()
	defer c.Close()
	c.Write(frameOf(kmsg.NewPtrApiVersionsRequest(), 9, 5))
	resp := readResponse(t, bufio.NewReader(c), 5)
	av := kmsg.NewPtrApiVersionsResponse()
	av.SetVersion(0)
	if err := av.ReadFrom(resp); err != nil || av.ErrorCode != errUnsupportedVersion || len(av.ApiKeys) != len(apis)-2 { // no SASL keys without ACL
		t.Fatalf("ApiVersions v9: %v %+v", err, av)
	}
	c.Write(frameOf(kmsg.NewPtrApiVersionsRequest(), 3, 6))
	resp = readResponse(t, bufio.NewReader(c), 6)
	av = kmsg.NewPtrApiVersionsResponse()
	av.SetVersion(3)
	if err := av.ReadFrom(resp); err != nil || av.ErrorCode != 0 {
		t.Fatalf("ApiVersions v3 after the refusals: %v %+v", err, av)
	}
}

// readResponse reads one response frame and checks its correlation id.
func readResponse(t *testing.T, r *bufio.Reader, corr int32) []byte {
	t.Helper()
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		t.Fatalf("read response: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(h[:])-4)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	if got := int32(binary.BigEndian.Uint32(h[4:])); got != corr {
		t.Fatalf("correlation %d, want %d", got, corr)
	}
	return body
}

// TestFuzzSeedsPresent: the seed corpus is checked in.
func TestFuzzSeedsPresent(t *testing.T) {
	m, _ := filepath.Glob("testdata/fuzz/FuzzDecodeRequest/*")
	if len(m) == 0 {
		if _, err := os.Stat("testdata"); err != nil {
			t.Fatal(err)
		}
		t.Fatal("no seeds in testdata/fuzz/FuzzDecodeRequest")
	}
}

// TestWriteFuzzSeeds rewrites the seed corpus (KEEL_WRITE_SEEDS=1): one
// request of every served key at its highest version, a produce with a
// real batch, and a few broken frames.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("KEEL_WRITE_SEEDS") == "" {
		t.Skip("set KEEL_WRITE_SEEDS=1 to rewrite testdata/fuzz/FuzzDecodeRequest")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeRequest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	seeds := map[string][]byte{}
	for key, rng := range apis {
		seeds[kmsg.NameForKey(key)] = frameOf(kmsg.RequestForKey(key), rng.max, 1)[4:]
	}
	p := kmsg.NewPtrProduceRequest()
	p.Acks = -1
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "seed"
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = testBatch(3, 0)
	pt.Partitions = append(pt.Partitions, pp)
	p.Topics = append(p.Topics, pt)
	seeds["ProduceBatch"] = frameOf(p, 9, 2)[4:]
	seeds["Truncated"] = seeds["ProduceBatch"][:40]
	seeds["HugeClientID"] = []byte{0, 3, 0, 9, 0, 0, 0, 1, 0x7f, 0xff, 'x'}
	for name, b := range seeds {
		data := "go test fuzz v1\n[]byte(" + quoteGo(b) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func quoteGo(b []byte) string {
	const hex = "0123456789abcdef"
	out := []byte{'"'}
	for _, c := range b {
		out = append(out, '\\', 'x', hex[c>>4], hex[c&15])
	}
	return string(append(out, '"'))
}

// FuzzHandle: every request the decoder accepts is answered (or, for
// acks=0, not) without a panic, and the answer encodes. JoinGroup and
// SyncGroup are left out (they wait for other members by design), and
// fetches do not wait.
func FuzzHandle(f *testing.F) {
	for key, rng := range apis {
		if key != 11 && key != 14 {
			f.Add(frameOf(kmsg.RequestForKey(key), rng.max, 1)[4:])
		}
	}
	p := produceReq(-1, "fuzz", testBatch(2, 0))
	f.Add(frameOf(p, 9, 2)[4:])
	n := startNode(f, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeRequest(b)
		if err != nil || req.key == 11 || req.key == 14 {
			return
		}
		if fr, ok := req.body.(*kmsg.FetchRequest); ok {
			fr.MaxWaitMillis = 0
		}
		if resp := n.srv.handle(req); resp != nil {
			appendResponse(nil, req.correlation, resp)
		}
	})
}

// A size prefix alone must not make the server take the size it
// announces: readFrame's buffer follows the bytes that come.
func TestReadFrameAllocatesWhatComes(t *testing.T) {
	const announced = 16 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := readFrame(bytes.NewReader(make([]byte, 1000)), announced); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a frame cut short: %v, want io.ErrUnexpectedEOF", err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("1000 bytes of a frame announced as %d took %d bytes", announced, got)
	}
	for _, n := range []int{0, 1, 64 << 10, 64<<10 + 1, 300_001} {
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i * 7)
		}
		got, err := readFrame(iotest.OneByteReader(bytes.NewReader(append(want, 1, 2, 3))), n)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("readFrame of %d bytes: %d bytes, %v", n, len(got), err)
		}
	}
}
