package wire

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds bytes to the frame reader and to the method and
// content-header decoders: they must return an error or a value, never
// panic, and a decoded method must re-encode to bytes that decode to it.
// Decoding a method or a content header must allocate within the bound of
// checkAllocBound (bytes per payload byte, plus a constant).
// Seeds: testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add(AppendMethodFrame(nil, 0, &ConnectionStartOk{Mechanism: "PLAIN", Response: []byte("\x00guest\x00guest"), Locale: "en_US",
		ClientProperties: Table{"capabilities": Table{"publisher_confirms": true}}}))
	f.Add(AppendMethodFrame(nil, 1, &BasicPublish{RoutingKey: "q", Mandatory: true}))
	voids := make([]any, 3000) // queue arguments and headers of the costliest shape
	f.Add(AppendMethodFrame(nil, 1, &QueueDeclare{Queue: "q", Arguments: Table{"a": voids}}))
	var props Writer
	(&BasicProperties{Flags: FlagHeaders, Headers: Table{"a": voids, "t": Table{"u": Table{}}}}).Write(&props)
	f.Add(AppendFrame(nil, FrameHeader, 1, AppendHeader(nil, 5, props.Buf)))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := NewFrameReader(bytes.NewReader(b))
		for {
			fm, err := fr.ReadFrame(1 << 16)
			if err != nil {
				return
			}
			switch fm.Type {
			case FrameMethod:
				checkAllocBound(t, "method", len(fm.Payload), func() { ReadMethod(fm.Payload) })
				m, err := ReadMethod(fm.Payload)
				if err != nil {
					continue
				}
				again, err := ReadMethod(AppendMethod(nil, m))
				if err != nil {
					t.Fatalf("%s re-encoded does not decode: %v", m.Name(), err)
				}
				_ = again
			case FrameHeader:
				checkAllocBound(t, "content header", len(fm.Payload), func() { ReadHeader(fm.Payload) })
			}
		}
	})
}
