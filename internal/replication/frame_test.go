package replication

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"runtime"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	h := hello{Version: protocolVersion, BrokerName: "broker-a", BrokerID: 1, SegmentBytes: 1 << 30, LogEnd: 4096, SyncFlush: true,
		Epochs: History{{1, 0}, {3, 100}}, Tail: []byte{1, 2, 3, 4}}
	var b []byte
	b = appendFrame(b, typeHello, h.encode())
	b = appendFrame(b, typeAck, ack{Written: 10, Flushed: 5}.encode())
	b = appendFrame(b, typeData, data{Epoch: 3, EpochStart: 100, Offset: 200, Confirmed: 150, Raw: []byte("raw")}.appendTo(nil))
	r := bufio.NewReader(bytes.NewReader(b))
	typ, p, _, err := readFrame(r, 1<<20, nil)
	if err != nil || typ != typeHello {
		t.Fatal(typ, err)
	}
	got, err := decodeHello(p)
	if err != nil || got.BrokerName != h.BrokerName || got.LogEnd != h.LogEnd || !got.SyncFlush || len(got.Epochs) != 2 || got.Epochs[1] != (Epoch{3, 100}) || !bytes.Equal(got.Tail, h.Tail) {
		t.Fatalf("hello %+v %v", got, err)
	}
	typ, p, _, err = readFrame(r, 1<<20, nil)
	if a, derr := decodeAck(p); err != nil || typ != typeAck || derr != nil || a != (ack{10, 5}) {
		t.Fatalf("ack %v %v %v", a, err, derr)
	}
	typ, p, _, err = readFrame(r, 1<<20, nil)
	if d, derr := decodeData(p); err != nil || typ != typeData || derr != nil || string(d.Raw) != "raw" || d.Offset != 200 {
		t.Fatalf("data %+v %v %v", d, err, derr)
	}
	if _, _, _, err := readFrame(r, 1<<20, nil); err != io.EOF {
		t.Fatalf("after the last frame: %v", err)
	}
}

// TestFrameRejectsMalformed: every corruption of a frame is refused with
// ErrMalformed (or a short read), never decoded.
func TestFrameRejectsMalformed(t *testing.T) {
	good := appendFrame(nil, typeAck, ack{Written: 10, Flushed: 5}.encode())
	cases := map[string][]byte{
		"length too small": {0, 0, 0, 4, typeAck, 0, 0, 0, 0},
		"length too large": {0x7f, 0, 0, 0, typeAck},
		"unknown type":     appendFrame(nil, 9, nil),
		"type zero":        appendFrame(nil, 0, nil),
	}
	flipped := bytes.Clone(good)
	flipped[7] ^= 0x40
	cases["flipped payload bit"] = flipped
	badCRC := bytes.Clone(good)
	badCRC[len(badCRC)-1] ^= 1
	cases["bad crc"] = badCRC
	for name, b := range cases {
		_, _, _, err := readFrame(bufio.NewReader(bytes.NewReader(b)), 1<<20, nil)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, _, _, err := readFrame(bufio.NewReader(bytes.NewReader(good[:len(good)-1])), 1<<20, nil); err != io.ErrUnexpectedEOF {
		t.Errorf("cut frame: %v", err)
	}
	for name, p := range map[string][]byte{
		"ack flushed above written": ack{Written: 1, Flushed: 2}.encode(),
		"ack trailing bytes":        append(ack{Written: 2, Flushed: 1}.encode(), 0),
		"hello epochs out of order": hello{Version: 1, Epochs: History{{2, 0}, {1, 5}}}.encode(),
		"hello short":               hello{Version: 1}.encode()[:5],
		"data epoch after offset":   data{Epoch: 1, EpochStart: 10, Offset: 5}.appendTo(nil),
	} {
		var err error
		switch {
		case name[:3] == "ack":
			_, err = decodeAck(p)
		case name[:4] == "data":
			_, err = decodeData(p)
		default:
			_, err = decodeHello(p)
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzFrame: any bytes either decode into a frame whose payload decodes
// or fails with an error; nothing panics, and a frame re-encodes to the
// same bytes.
func FuzzFrame(f *testing.F) {
	f.Add(appendFrame(nil, typeHello, hello{Version: 1, BrokerName: "b", BrokerID: 1, SegmentBytes: 1 << 20, Epochs: History{{1, 0}}}.encode()))
	f.Add(appendFrame(nil, typeHelloOK, helloOK{MasterEnd: 9, Epochs: History{{1, 0}, {2, 9}}}.encode()))
	f.Add(appendFrame(nil, typeReject, encodeReject(rejectRetry, "no")))
	f.Add(appendFrame(nil, typeData, data{Epoch: 1, Offset: 8, Raw: []byte{1, 2, 3}}.appendTo(nil)))
	f.Add(appendFrame(nil, typeAck, ack{Written: 3, Flushed: 2}.encode()))
	f.Add(appendFrame(nil, typeOffsets, encodeOffsets([]OffsetReport{{Group: "g", Topic: "t", QueueID: 1, Offset: 5}})))
	f.Add([]byte{0, 1, 0, 0, typeHello}) // announces 64 KiB, sends one byte
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFrameAllocs(t, b)
		typ, p, _, err := readFrame(bufio.NewReader(bytes.NewReader(b)), 1<<16, nil)
		if err != nil {
			return
		}
		if again := appendFrame(nil, typ, p); !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("frame re-encodes differently")
		}
		switch typ {
		case typeHello:
			if h, err := decodeHello(p); err == nil && h.Epochs.Valid() != nil {
				t.Fatal("invalid epochs decoded")
			}
		case typeHelloOK:
			decodeHelloOK(p)
		case typeReject:
			decodeReject(p)
		case typeData:
			if d, err := decodeData(p); err == nil && d.EpochStart > d.Offset {
				t.Fatal("epoch after data decoded")
			}
		case typeAck:
			if a, err := decodeAck(p); err == nil && a.Flushed > a.Written {
				t.Fatal("flushed above written decoded")
			}
		case typeOffsets:
			decodeOffsets(p)
		}
	})
}

// Reading and decoding a frame allocates at most frameAllocPerByte bytes
// per byte that arrived, plus frameChunkBytes and a constant: never what
// a frame's length announces before its bytes are there.
const frameAllocPerByte = 4

// checkFrameAllocs fails t when reading and decoding the frame at the
// start of b allocates more than the bound for len(b).
func checkFrameAllocs(t testing.TB, b []byte) float64 {
	t.Helper()
	// The least of three runs: the count is the process's, and goroutines
	// other tests left running may allocate meanwhile.
	n := uint64(math.MaxUint64)
	for range 3 {
		br := bufio.NewReader(bytes.NewReader(b))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		typ, p, _, err := readFrame(br, 1<<20, nil)
		if err == nil {
			switch typ {
			case typeHello:
				decodeHello(p)
			case typeHelloOK:
				decodeHelloOK(p)
			case typeReject:
				decodeReject(p)
			case typeData:
				decodeData(p)
			case typeAck:
				decodeAck(p)
			case typeOffsets:
				decodeOffsets(p)
			}
		}
		runtime.ReadMemStats(&after)
		n = min(n, after.TotalAlloc-before.TotalAlloc)
	}
	if limit := uint64(frameAllocPerByte*len(b) + frameChunkBytes + 4096); n > limit {
		t.Fatalf("%d bytes read allocated %d (%.1f per byte), above the bound of %d", len(b), n, float64(n)/float64(max(1, len(b))), limit)
	}
	return float64(n) / float64(max(1, len(b)))
}

// A peer that announces a large frame and sends a few bytes of it costs
// a read chunk, not the frame (the master reads a HELLO of up to 1 MiB
// from anyone that connects).
func TestAnnouncedFrameNotAllocatedUpFront(t *testing.T) {
	b := binary.BigEndian.AppendUint32(nil, 1<<20)
	b = append(b, typeHello, 0, 1, 2, 3)
	checkFrameAllocs(t, b)
	// The largest legitimate messages decode within the bound too.
	epochs := make(History, maxEpochs)
	for i := range epochs {
		epochs[i] = Epoch{Epoch: uint32(i + 1), Start: int64(i) * 10}
	}
	hello := appendFrame(nil, typeHello, hello{Version: protocolVersion, BrokerName: "broker-a", BrokerID: 1,
		SegmentBytes: 1 << 30, LogEnd: 1 << 40, Epochs: epochs}.encode())
	offs := make([]OffsetReport, maxOffsetsPerFrame)
	for i := range offs {
		offs[i] = OffsetReport{Group: "g", Topic: "t", QueueID: int32(i), Offset: 1}
	}
	for name, fr := range map[string][]byte{"hello": hello, "offsets": appendFrame(nil, typeOffsets, encodeOffsets(offs))} {
		per := checkFrameAllocs(t, fr)
		t.Logf("%s of %d bytes: %.2f bytes allocated per byte", name, len(fr), per)
	}
}
