package wire

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds bytes to the frame reader and to the method and
// content-header decoders: they must return an error or a value, never
// panic, and a decoded method must re-encode to bytes that decode to it.
// Seeds: testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add(AppendMethodFrame(nil, 0, &ConnectionStartOk{Mechanism: "PLAIN", Response: []byte("\x00guest\x00guest"), Locale: "en_US",
		ClientProperties: Table{"capabilities": Table{"publisher_confirms": true}}}))
	f.Add(AppendMethodFrame(nil, 1, &BasicPublish{RoutingKey: "q", Mandatory: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := NewFrameReader(bytes.NewReader(b))
		for {
			fm, err := fr.ReadFrame(1 << 16)
			if err != nil {
				return
			}
			switch fm.Type {
			case FrameMethod:
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
				ReadHeader(fm.Payload)
			}
		}
	})
}
