package remoting

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/doorstats"
)

// TestReadFrameAMQPAnswer: an AMQP server's protocol header where a frame
// belongs is named as such, not as a frame of 1,095,586,128 bytes.
func TestReadFrameAMQPAnswer(t *testing.T) {
	_, err := readPayload(bytes.NewReader([]byte("AMQP\x00\x00\x09\x01")), DefaultMaxFrameBytes)
	if !errors.Is(err, ErrAMQPPeer) {
		t.Fatalf("AMQP answer: %v, want ErrAMQPPeer", err)
	}
}

// TestServerTraffic: the server's Traffic counts connections, requests,
// error answers and the bytes on the wire both ways.
func TestServerTraffic(t *testing.T) {
	var tr doorstats.Counters
	h := HandlerFunc(func(_ context.Context, _ *Conn, req *Command) *Command {
		if req.Code == 99 {
			return req.NewResponse(ResSystemError, "no")
		}
		if req.Code == 98 {
			return req.NewResponse(ResPullNotFound, "")
		}
		return req.NewResponse(ResSuccess, "")
	})
	_, addr := startServer(t, ServerConfig{Traffic: &tr}, h)
	cl := dialClient(t, addr, ClientConfig{})
	var sent int
	for _, code := range []int16{1, 98, 99} {
		req := NewRequest(code, map[string]string{"k": "v"}, []byte("body"))
		frame, err := EncodeFrame(nil, req)
		if err != nil {
			t.Fatal(err)
		}
		sent += len(frame)
		invoke(t, cl, req)
	}
	s := tr.Snapshot(doorstats.RocketMQ)
	if s.Accepted != 1 || s.Open != 1 || s.Requests != 3 || s.Errors != 1 || s.BytesIn != int64(sent) || s.BytesOut == 0 {
		t.Fatalf("traffic %+v (sent %d bytes)", s, sent)
	}
	// A connection closed for a malformed frame counts as an error.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.Write([]byte{0, 0, 0, 1, 0})
	nc.SetReadDeadline(time.Now().Add(waitTimeout))
	nc.Read(make([]byte, 1)) // returns when the server closes
	nc.Close()
	cl.Close()
	deadline := time.Now().Add(waitTimeout)
	for {
		s = tr.Snapshot(doorstats.RocketMQ)
		if s.Open == 0 && s.Accepted == 2 && s.Errors == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the closes: %+v", s)
		}
		time.Sleep(time.Millisecond)
	}
}
