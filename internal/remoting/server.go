package remoting

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/doorstats"
)

// Server defaults.
const (
	// DefaultIdleTimeout is a little above the Go client's 120 s read
	// timeout, so clients normally close idle connections first.
	DefaultIdleTimeout        = 130 * time.Second
	DefaultWriteTimeout       = 60 * time.Second
	DefaultMaxInflightPerConn = 512
	DefaultWriteQueueLen      = 1024
	DefaultKeepAlive          = 30 * time.Second
)

// ServerConfig configures a Server. Zero values take the defaults.
type ServerConfig struct {
	MaxFrameBytes int // largest accepted or sent frame (length field); default 16 MiB
	// IdleTimeout closes a connection when no frame arrives for this long
	// (a half-sent frame counts as none). Negative disables it.
	IdleTimeout time.Duration
	// WriteTimeout fails a connection whose peer does not accept a write
	// for this long. Negative disables it.
	WriteTimeout       time.Duration
	MaxInflightPerConn int // concurrently handled requests per connection
	WriteQueueLen      int // queued outbound frames per connection before senders block
	// MaxQueuedBytesPerConn bounds the response bytes a connection holds
	// before its peer reads them (queued frames, or Command.HeldBytes when
	// larger, plus responses waiting for room); default 16 MiB, negative:
	// unbounded. A response that does not fit waits (handlers and
	// WriteResponse block), and the connection stops reading new requests
	// while the queued bytes plus an estimate for the running handlers
	// would exceed it, so a peer that stops reading gets TCP back-pressure
	// and, after WriteTimeout, a closed connection.
	MaxQueuedBytesPerConn int
	// KeepAlive is the TCP keepalive idle time used to detect half-open
	// connections. Negative disables keepalive.
	KeepAlive time.Duration
	TLS       *tls.Config // optional: serve TLS
	Logger    *slog.Logger
	// OnConnClose runs once per connection after it has closed (e.g. the
	// broker unregisters the connection's clients).
	OnConnClose func(*Conn)
	// Traffic, when set, counts the connections, requests, error answers
	// and bytes of the server's connections (the metrics' door series).
	Traffic *doorstats.Counters
	// FrameBudget, if set, is claimed each inbound frame's bytes once its
	// length is read and before its buffer is taken, and given them back
	// once the frame is decoded (a broker-wide request budget).
	FrameBudget FrameBudget
}

// FrameBudget is a byte budget shared beyond one connection. ClaimBytes
// waits while n bytes do not fit, so the connection reads nothing
// meanwhile, and reports false if done closes first (the connection is
// closing); ReleaseBytes gives back what a ClaimBytes took.
type FrameBudget interface {
	ClaimBytes(n int64, done <-chan struct{}) bool
	ReleaseBytes(n int64)
}

func (cfg ServerConfig) withDefaults() ServerConfig {
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.MaxInflightPerConn <= 0 {
		cfg.MaxInflightPerConn = DefaultMaxInflightPerConn
	}
	if cfg.WriteQueueLen <= 0 {
		cfg.WriteQueueLen = DefaultWriteQueueLen
	}
	if cfg.MaxQueuedBytesPerConn == 0 {
		cfg.MaxQueuedBytesPerConn = DefaultMaxQueuedBytesPerConn
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return cfg
}

func (cfg ServerConfig) connConfig() connConfig {
	return connConfig{
		maxFrameBytes: cfg.MaxFrameBytes,
		idleTimeout:   cfg.IdleTimeout,
		writeTimeout:  cfg.WriteTimeout,
		maxInflight:   cfg.MaxInflightPerConn,
		writeQueueLen: cfg.WriteQueueLen,
		maxQueued:     int64(cfg.MaxQueuedBytesPerConn),
		logger:        cfg.Logger,
		traffic:       cfg.Traffic,
		frameBudget:   cfg.FrameBudget,
	}
}

// Server accepts remoting connections and dispatches their requests to a
// Handler.
type Server struct {
	cfg     ServerConfig
	h       Handler
	nextID  atomic.Uint64
	opaque  atomic.Int32 // server-to-client request ids
	connsWG sync.WaitGroup

	mu        sync.Mutex
	closing   bool
	listeners map[net.Listener]struct{}
	conns     map[*Conn]struct{}
	addr      net.Addr
	done      chan struct{}
}

// NewServer makes a server; nothing runs until Serve.
func NewServer(cfg ServerConfig, h Handler) *Server {
	return &Server{
		cfg:       cfg.withDefaults(),
		h:         h,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*Conn]struct{}),
		done:      make(chan struct{}),
	}
}

// Addr is the address of the listener most recently passed to Serve, or
// nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Serve accepts connections on ln until Shutdown (then it returns
// ErrServerClosed) or a listener failure. It may be called for several
// listeners.
func (s *Server) Serve(ln net.Listener) error {
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.addr = ln.Addr()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	backoff := 5 * time.Millisecond
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("remoting: accept: %w", err)
			}
			// Resource exhaustion (EMFILE) and aborted handshakes are
			// transient: back off and keep serving.
			s.cfg.Logger.Warn("remoting: accept failed", "err", err, "retry_in", backoff)
			if !s.sleep(backoff) {
				return ErrServerClosed
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		s.startConn(nc)
	}
}

func (s *Server) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func (s *Server) startConn(nc net.Conn) {
	setKeepAlive(nc, s.cfg.KeepAlive)
	s.cfg.Traffic.Accept()
	c := newConn(s.nextID.Add(1), nc, s.cfg.connConfig(), s.h, &s.opaque)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		nc.Close()
		s.cfg.Traffic.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.connsWG.Add(1)
	s.mu.Unlock()
	s.cfg.Logger.Debug("remoting: connection accepted", "conn", c.id, "remote", nc.RemoteAddr().String())
	go c.run(s.connClosed)
}

func (s *Server) connClosed(c *Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	defer s.connsWG.Done()
	s.cfg.Traffic.Close()
	if s.cfg.OnConnClose != nil {
		s.cfg.OnConnClose(c)
	}
}

// setKeepAlive enables TCP keepalive so half-open connections are found.
func setKeepAlive(nc net.Conn, idle time.Duration) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	// An interface, not *net.TCPConn: a listener may hand out connections
	// that embed one (netlimit's).
	tcp, ok := nc.(interface {
		SetKeepAlive(bool) error
		SetKeepAliveConfig(net.KeepAliveConfig) error
	})
	if !ok {
		return
	}
	if idle < 0 {
		tcp.SetKeepAlive(false)
		return
	}
	tcp.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: idle, Interval: idle / 3, Count: 3})
}

// Conns returns a snapshot of the open connections.
func (s *Server) Conns() []*Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

// Shutdown stops accepting, stops reading new requests, lets in-flight
// handlers finish and their responses flush, then closes every
// connection. If ctx ends first the remaining connections are closed at
// once and ctx's error is returned. Deferred responses (Handler returned
// nil) must be written before Shutdown, or they are lost with the
// connection.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		close(s.done)
		for ln := range s.listeners {
			ln.Close()
		}
		for c := range s.conns {
			c.beginDrain()
		}
	}
	s.mu.Unlock()
	drained := make(chan struct{})
	go func() {
		s.connsWG.Wait()
		close(drained)
	}()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
	}
	for _, c := range s.Conns() {
		c.closeWith(ErrServerClosed)
	}
	<-drained
	return fmt.Errorf("remoting: shutdown: %w", ctx.Err())
}
