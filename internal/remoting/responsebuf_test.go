package remoting

import (
	"bytes"
	"fmt"
	"testing"
)

// TestNewResponseInEncodesAsNewResponse: a response made in a
// ResponseBuf is the same command as one from NewResponse, field for
// field and byte for byte on the wire, with more fields than the buffer
// holds too, and a buffer used again makes a new response.
func TestNewResponseInEncodesAsNewResponse(t *testing.T) {
	var buf ResponseBuf
	keys := []string{"msgId", "queueOffset", "queueId", "transactionId", "MSG_REGION", "TRACE_ON", "x", "a"}
	for n := 0; n <= len(keys); n++ {
		for _, ser := range []byte{SerializeJSON, SerializeRocketMQ} {
			req := &Command{Code: ReqSendMessageV2, Opaque: int32(100 + n), SerializeType: ser}
			want := req.NewResponse(ResSuccess, "r")
			got := req.NewResponseIn(&buf, ResSuccess, "r")
			for i, k := range keys[:n] {
				v := fmt.Sprintf("v%d\x01", i)
				want.AddExt(k, v)
				got.AddExt(k, v)
			}
			if n > 1 {
				want.AddExt(keys[0], "again") // a key set again takes the new value
				got.AddExt(keys[0], "again")
			}
			wb, err := EncodeFrame(nil, want)
			if err != nil {
				t.Fatal(err)
			}
			gb, err := EncodeFrame(nil, got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(gb, wb) {
				t.Fatalf("%d fields, serialize type %d:\n got  %q\n want %q", n, ser, gb, wb)
			}
			for _, k := range append(keys, "absent") {
				gv, gok := got.LookupExt(k)
				wv, wok := want.LookupExt(k)
				if gv != wv || gok != wok {
					t.Fatalf("%d fields: LookupExt(%q) = %q, %v; want %q, %v", n, k, gv, gok, wv, wok)
				}
			}
			if got.String() != want.String() {
				t.Fatalf("String() = %s, want %s", got, want)
			}
		}
	}
}

// TestNewResponseInAllocates: a send's response with its six fields made
// in a ResponseBuf allocates nothing.
func TestNewResponseInAllocates(t *testing.T) {
	buf := new(ResponseBuf)
	req := &Command{Code: ReqSendMessageV2, Opaque: 7}
	allocs := testing.AllocsPerRun(100, func() {
		resp := req.NewResponseIn(buf, ResSuccess, "")
		resp.AddExt("msgId", "7F00000100002A9F00000000000BEEF0")
		resp.AddExt("queueOffset", "12")
		resp.AddExt("queueId", "2")
		resp.AddExt("transactionId", "k")
		resp.AddExt("MSG_REGION", "DefaultRegion")
		resp.AddExt("TRACE_ON", "true")
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per response, want 0", allocs)
	}
}

// TestDeferInAllocates: a Reply made in the handler's value (DeferIn)
// costs no allocation, where Defer makes one.
func TestDeferInAllocates(t *testing.T) {
	c := &Conn{}
	req := &Command{Code: ReqSendMessageV2}
	var r Reply
	in := testing.AllocsPerRun(100, func() {
		req.reply, r = nil, Reply{}
		if c.DeferIn(req, &r) != &r {
			t.Fatal("DeferIn did not use the given Reply")
		}
	})
	made := testing.AllocsPerRun(100, func() {
		req.reply = nil
		c.Defer(req)
	})
	if in != 0 || made != 1 {
		t.Fatalf("DeferIn: %v allocations, Defer: %v; want 0 and 1", in, made)
	}
}
