package replication

import (
	"bufio"
	"bytes"
	"errors"
	"io"
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
	f.Fuzz(func(t *testing.T, b []byte) {
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
		}
	})
}
