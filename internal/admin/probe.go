package admin

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// ErrNotNamesrv is wrapped by the error for an address given as a
// NameServer that answers as something else.
var ErrNotNamesrv = errors.New("admin: not a NameServer")

// NotNamesrvError says what answered at an address given as a NameServer.
type NotNamesrvError struct {
	Addr  string
	Looks string // "a broker", "an HTTP server", ...
	Err   error  // what the exchange failed with
}

func (e *NotNamesrvError) Error() string {
	return fmt.Sprintf("admin: %s is not a NameServer (it looks like %s); a NameServer listens on port 9876 by default", e.Addr, e.Looks)
}

func (e *NotNamesrvError) Unwrap() []error { return []error{ErrNotNamesrv, e.Err} }

// notNamesrv recognises, from how a NameServer request to addr failed, a
// peer that is something else: an HTTP server answers in HTTP (Keel's own
// HTTP listener answers a remoting frame at once, see cmd/keel), an AMQP
// listener with its protocol header, a Kafka listener closes the
// connection (and answers a Kafka ApiVersions request asked afterwards),
// and a broker refuses NameServer request codes as unsupported but answers
// GET_BROKER_RUNTIME_INFO. It returns nil when err says nothing of the kind.
func (c *Client) notNamesrv(ctx context.Context, addr string, err error) error {
	if errors.Is(err, remoting.ErrHTTPPeer) {
		return &NotNamesrvError{Addr: addr, Looks: "an HTTP server", Err: err}
	}
	if errors.Is(err, remoting.ErrAMQPPeer) {
		return &NotNamesrvError{Addr: addr, Looks: "an AMQP listener", Err: err}
	}
	if closedByPeer(err) && c.kafkaAnswers(ctx, addr) {
		return &NotNamesrvError{Addr: addr, Looks: "a Kafka listener", Err: err}
	}
	var re *Error
	if !errors.As(err, &re) || re.Code != remoting.ResRequestCodeNotSupported {
		return nil
	}
	looks := "a RocketMQ remoting server that is not a NameServer"
	if _, perr := c.invoke(ctx, addr, remoting.ReqGetBrokerRuntimeInfo, nil, nil); perr == nil {
		looks = "a broker"
	}
	return &NotNamesrvError{Addr: addr, Looks: looks, Err: err}
}

// closedByPeer reports whether err says the peer ended the connection
// without an answer (what a Kafka listener does with a remoting frame).
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, remoting.ErrClosed)
}

// kafkaProbeTimeout bounds the Kafka ApiVersions probe.
const kafkaProbeTimeout = 2 * time.Second

// kafkaAnswers sends addr a Kafka ApiVersions v0 request and reports
// whether the answer is a Kafka response to it (its correlation id).
func (c *Client) kafkaAnswers(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, kafkaProbeTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer nc.Close()
	if c.cfg.TLS != nil {
		tc := tls.Client(nc, c.cfg.TLS)
		if tc.HandshakeContext(ctx) != nil {
			return false
		}
		nc = tc
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	const correlation = 0x6b65656c // "keel"
	clientID := "keel-admin"
	req := binary.BigEndian.AppendUint32(nil, uint32(2+2+4+2+len(clientID)))
	req = binary.BigEndian.AppendUint16(req, 18) // ApiVersions
	req = binary.BigEndian.AppendUint16(req, 0)  // v0
	req = binary.BigEndian.AppendUint32(req, correlation)
	req = binary.BigEndian.AppendUint16(req, uint16(len(clientID)))
	req = append(req, clientID...)
	if _, err := nc.Write(req); err != nil {
		return false
	}
	var head [8]byte // size, correlation id
	if _, err := io.ReadFull(nc, head[:]); err != nil {
		return false
	}
	size := binary.BigEndian.Uint32(head[:4])
	return size >= 6 && size < 1<<20 && binary.BigEndian.Uint32(head[4:]) == correlation
}
