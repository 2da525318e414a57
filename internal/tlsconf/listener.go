package tlsconf

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// tlsHandshakeRecord is the first byte of every TLS connection.
const tlsHandshakeRecord = 0x16

// Limits for answering a plain client on an enforcing listener.
const (
	maxPlainFrame    = 64 << 10 // larger first frames are not read, just closed
	plainReplyWindow = 2 * time.Second
)

// PlainRefusedRemark is the remark of the error answer a plain-TCP client
// gets from an enforcing listener.
const PlainRefusedRemark = "this port accepts TLS connections only (tlsMode=enforcing): enable TLS in the client (Go client: WithTls(true))"

// ErrPlainRefused is the read error of a plain-TCP connection on an
// enforcing listener.
var ErrPlainRefused = errors.New("tlsconf: plain TCP connection refused: the listener requires TLS")

// ListenerConfig configures Wrap.
type ListenerConfig struct {
	TLS  *tls.Config // required unless Mode is Disabled
	Mode Mode
	// HandshakeTimeout bounds the TLS handshake. Default 10 s.
	HandshakeTimeout time.Duration
	// KeepAlive is the TCP keepalive idle time of accepted connections
	// (the remoting server cannot reach the TCP connection through the
	// wrapper). Default 30 s; negative disables.
	KeepAlive time.Duration
	Logger    *slog.Logger
}

// Wrap returns ln serving cfg.Mode. Disabled returns ln itself.
func Wrap(ln net.Listener, cfg ListenerConfig) (net.Listener, error) {
	switch cfg.Mode {
	case Disabled, "":
		return ln, nil
	case Permissive, Enforcing:
	default:
		return nil, fmt.Errorf("%w: tls mode %q", ErrConfig, cfg.Mode)
	}
	if cfg.TLS == nil {
		return nil, fmt.Errorf("%w: tls mode %s without a certificate", ErrConfig, cfg.Mode)
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &listener{Listener: ln, cfg: cfg}, nil
}

type listener struct {
	net.Listener
	cfg ListenerConfig
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tcp, ok := nc.(interface { // a *net.TCPConn, or a connection embedding one
		SetKeepAlive(bool) error
		SetKeepAliveConfig(net.KeepAliveConfig) error
	}); ok {
		if l.cfg.KeepAlive < 0 {
			tcp.SetKeepAlive(false)
		} else {
			idle := l.cfg.KeepAlive
			tcp.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: idle, Interval: idle / 3, Count: 3})
		}
	}
	return &sniffConn{Conn: nc, l: l}, nil
}

// sniffConn decides on first use whether the peer speaks TLS. The
// embedded Conn is the raw TCP connection: addresses and deadlines always
// go to it (a tls.Conn sets deadlines on it too).
type sniffConn struct {
	net.Conn
	l    *listener
	once sync.Once

	mu   sync.Mutex
	conn net.Conn // the decided connection (TLS or plain)
	err  error    // why the connection is unusable
}

func (c *sniffConn) decide() (net.Conn, error) {
	c.once.Do(c.sniff)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn, c.err
}

func (c *sniffConn) Read(p []byte) (int, error) {
	conn, err := c.decide()
	if err != nil {
		return 0, err
	}
	return conn.Read(p)
}

func (c *sniffConn) Write(p []byte) (int, error) {
	conn, err := c.decide()
	if err != nil {
		return 0, err
	}
	return conn.Write(p)
}

func (c *sniffConn) Close() error {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		return conn.Close()
	}
	return c.Conn.Close()
}

func (c *sniffConn) set(conn net.Conn, err error) {
	c.mu.Lock()
	c.conn, c.err = conn, err
	c.mu.Unlock()
}

func (c *sniffConn) sniff() {
	var first [1]byte
	if _, err := io.ReadFull(c.Conn, first[:]); err != nil {
		c.set(nil, err)
		return
	}
	pc := &prefixConn{Conn: c.Conn, prefix: first[:]}
	if first[0] == tlsHandshakeRecord {
		c.set(c.handshake(pc))
		return
	}
	if c.l.cfg.Mode == Permissive {
		c.set(pc, nil)
		return
	}
	c.l.cfg.Logger.Warn("tls: plain TCP connection to a TLS-only listener (tlsMode=enforcing); answering with an error and closing",
		"remote", c.RemoteAddr().String(), "first_byte", fmt.Sprintf("0x%02x", first[0]))
	refusePlain(pc)
	c.set(nil, ErrPlainRefused)
}

func (c *sniffConn) handshake(pc net.Conn) (net.Conn, error) {
	tc := tls.Server(pc, c.l.cfg.TLS)
	ctx, cancel := context.WithTimeout(context.Background(), c.l.cfg.HandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.l.cfg.Logger.Warn("tls: handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		return nil, fmt.Errorf("tlsconf: TLS handshake with %s: %w", c.RemoteAddr(), err)
	}
	return tc, nil
}

// refusePlain reads the plain client's first frame and, if it is a
// request, answers it with SYSTEM_ERROR and PlainRefusedRemark, so the
// client reports a clear error instead of a dropped connection.
func refusePlain(pc *prefixConn) {
	pc.SetDeadline(time.Now().Add(plainReplyWindow))
	var lenBuf [4]byte
	if _, err := io.ReadFull(pc, lenBuf[:]); err != nil {
		return
	}
	n := binary.BigEndian.Uint32(lenBuf[:])
	if n < 4 || n > maxPlainFrame {
		return
	}
	frame := make([]byte, 4+n)
	copy(frame, lenBuf[:])
	if _, err := io.ReadFull(pc, frame[4:]); err != nil {
		return
	}
	req, err := remoting.DecodeFrame(frame)
	if err != nil || req.IsResponse() || req.IsOneway() {
		return
	}
	out, err := remoting.EncodeFrame(nil, req.NewResponse(remoting.ResSystemError, PlainRefusedRemark))
	if err != nil {
		return
	}
	pc.Write(out)
}

// prefixConn replays bytes already read before reading from Conn.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
