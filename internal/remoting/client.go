package remoting

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"
)

// ClientConfig configures a Client. Zero values take the defaults.
type ClientConfig struct {
	MaxFrameBytes int           // default 16 MiB
	IdleTimeout   time.Duration // close after this long without a frame; 0 or negative: never
	WriteTimeout  time.Duration // default 60 s; negative disables
	MaxInflight   int           // concurrently handled server requests; default 512
	WriteQueueLen int           // default 1024
	KeepAlive     time.Duration // TCP keepalive idle; default 30 s; negative disables
	TLS           *tls.Config   // optional: dial TLS
	Handler       Handler       // optional: serves requests the server sends us
	Logger        *slog.Logger
	// MaxQueuedBytes is the byte budget for responses to server requests
	// (see ServerConfig.MaxQueuedBytesPerConn); default 16 MiB, negative:
	// unbounded.
	MaxQueuedBytes int
}

// Client is one connection to a remoting server (a NameServer or a
// broker). It does not reconnect: after Done is closed, Dial again.
type Client struct {
	conn    *Conn
	opaque  atomic.Int32
	stopped chan struct{}
}

// Dial connects to addr. ctx bounds the connection attempt only.
func Dial(ctx context.Context, addr string, cfg ClientConfig) (*Client, error) {
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = DefaultMaxInflightPerConn
	}
	if cfg.WriteQueueLen <= 0 {
		cfg.WriteQueueLen = DefaultWriteQueueLen
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.MaxQueuedBytes == 0 {
		cfg.MaxQueuedBytes = DefaultMaxQueuedBytesPerConn
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	nc, err := dial(ctx, addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("remoting: dial %s: %w", addr, err)
	}
	setKeepAlive(nc, cfg.KeepAlive)
	cc := connConfig{
		maxFrameBytes: cfg.MaxFrameBytes,
		idleTimeout:   cfg.IdleTimeout,
		writeTimeout:  cfg.WriteTimeout,
		maxInflight:   cfg.MaxInflight,
		writeQueueLen: cfg.WriteQueueLen,
		maxQueued:     int64(cfg.MaxQueuedBytes),
		logger:        cfg.Logger,
		// The broker or NameServer this client chose answers its requests.
		trustFrameLength: true,
	}
	cl := &Client{stopped: make(chan struct{})}
	cl.conn = newConn(0, nc, cc, cfg.Handler, &cl.opaque)
	go cl.conn.run(func(*Conn) { close(cl.stopped) })
	return cl, nil
}

func dial(ctx context.Context, addr string, cfg ClientConfig) (net.Conn, error) {
	if cfg.TLS != nil {
		d := tls.Dialer{Config: cfg.TLS}
		return d.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// Invoke sends req and waits for the response or ctx's end.
func (cl *Client) Invoke(ctx context.Context, req *Command) (*Command, error) {
	return cl.conn.Invoke(ctx, req)
}

// InvokeAsync sends req and calls done with its response or error (see
// Conn.InvokeAsync).
func (cl *Client) InvokeAsync(req *Command, timeout time.Duration, done func(*Command, error)) error {
	return cl.conn.InvokeAsync(req, timeout, done)
}

// InvokeOneway sends req with the oneway flag; no response is expected.
func (cl *Client) InvokeOneway(req *Command) error { return cl.conn.InvokeOneway(req) }

// OnRequest sets the handler for requests the server sends us. Without
// one they are answered REQUEST_CODE_NOT_SUPPORTED.
func (cl *Client) OnRequest(h Handler) { cl.conn.setHandler(h) }

// Conn is the underlying connection.
func (cl *Client) Conn() *Conn { return cl.conn }

// Done is closed when the connection has closed.
func (cl *Client) Done() <-chan struct{} { return cl.conn.Done() }

// Close closes the connection and waits for its goroutines to stop
// (handlers of server requests may still be finishing; their ctx is
// cancelled).
func (cl *Client) Close() error {
	cl.conn.Close()
	<-cl.stopped
	return nil
}
