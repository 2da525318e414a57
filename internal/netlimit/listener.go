package netlimit

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound the connections one listener keeps open.
type Limits struct {
	MaxConns        int // open connections of the listener; <= 0: no limit
	MaxConnsPerAddr int // open connections from one source IP address; <= 0: no limit
}

// LogInterval is the least time between two lines a listener logs about
// refused connections, or about failing accepts.
const LogInterval = 10 * time.Second

// Accept-error back-off: the first pause and the longest.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// Listener wraps a net.Listener with Limits. Accepted connections are
// *Conn values (or TCPConn-embedding ones) that free their slot on Close.
type Listener struct {
	net.Listener
	name   string
	limits Limits
	log    *slog.Logger

	done      chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	open    int
	perAddr map[string]int

	refusedTotal   atomic.Uint64 // refused for MaxConns, since start
	refusedPerAddr atomic.Uint64 // refused for MaxConnsPerAddr, since start
	acceptErrors   atomic.Uint64

	logMu      sync.Mutex
	lastLog    time.Time // of refusals
	unlogged   uint64    // refusals since lastLog
	lastErrLog time.Time
}

// NewListener wraps ln; name names the listener in log lines and figures
// ("Kafka", "broker", ...).
func NewListener(ln net.Listener, name string, limits Limits, log *slog.Logger) *Listener {
	return &Listener{Listener: ln, name: name, limits: limits, log: log, done: make(chan struct{}), perAddr: map[string]int{}}
}

// Accept returns the next connection within the limits. It retries accept
// errors other than the listener's closing, with a pause; it returns an
// error only once the listener is closed.
func (l *Listener) Accept() (net.Conn, error) {
	backoff := acceptBackoffMin
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.isClosed() {
				return nil, err
			}
			l.acceptErrors.Add(1)
			l.logAcceptError(err, backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return nil, net.ErrClosed
			}
			backoff = min(2*backoff, acceptBackoffMax)
			continue
		}
		backoff = acceptBackoffMin
		if wc, ok := l.admit(c); ok {
			return wc, nil
		}
	}
}

// admit takes a slot for c, or closes c and counts the refusal.
func (l *Listener) admit(c net.Conn) (net.Conn, bool) {
	addr := hostOf(c.RemoteAddr())
	l.mu.Lock()
	reason := ""
	switch {
	case l.limits.MaxConns > 0 && l.open >= l.limits.MaxConns:
		reason = "maxConnections"
	case l.limits.MaxConnsPerAddr > 0 && l.perAddr[addr] >= l.limits.MaxConnsPerAddr:
		reason = "maxConnectionsPerAddress"
	default:
		l.open++
		l.perAddr[addr]++
	}
	l.mu.Unlock()
	if reason != "" {
		// Counted and logged before the close, so that what a peer sees
		// refused is in the stats and the log by then.
		if reason == "maxConnections" {
			l.refusedTotal.Add(1)
		} else {
			l.refusedPerAddr.Add(1)
		}
		l.logRefused(addr, reason)
		c.Close()
		return nil, false
	}
	release := func() { l.release(addr) }
	if tc, ok := c.(*net.TCPConn); ok {
		return &TCPConn{TCPConn: tc, release: onceFunc(release)}, true
	}
	return &Conn{Conn: c, release: onceFunc(release)}, true
}

func (l *Listener) release(addr string) {
	l.mu.Lock()
	l.open--
	if l.perAddr[addr]--; l.perAddr[addr] <= 0 {
		delete(l.perAddr, addr)
	}
	l.mu.Unlock()
}

func (l *Listener) logRefused(addr, reason string) {
	l.logMu.Lock()
	l.unlogged++
	now := time.Now()
	if now.Sub(l.lastLog) < LogInterval {
		l.logMu.Unlock()
		return
	}
	n := l.unlogged
	l.unlogged, l.lastLog = 0, now
	l.logMu.Unlock()
	l.log.Warn("connection refused: limit reached", "listener", l.name, "limit", reason,
		"remote", addr, "max_connections", l.limits.MaxConns, "max_connections_per_address", l.limits.MaxConnsPerAddr,
		"refused_since_last_line", n)
}

func (l *Listener) logAcceptError(err error, retryIn time.Duration) {
	l.logMu.Lock()
	now := time.Now()
	if now.Sub(l.lastErrLog) < LogInterval {
		l.logMu.Unlock()
		return
	}
	l.lastErrLog = now
	l.logMu.Unlock()
	l.log.Warn("accept failed; retrying", "listener", l.name, "err", err, "retry_in", retryIn)
}

func (l *Listener) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// Close closes the listener (not the connections it accepted).
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// ListenerStats are one listener's figures.
type ListenerStats struct {
	Listener       string
	Open           int
	RefusedTotal   uint64 // refused for MaxConns, since start
	RefusedPerAddr uint64 // refused for MaxConnsPerAddr, since start
	AcceptErrors   uint64
}

// Stats returns the listener's figures.
func (l *Listener) Stats() ListenerStats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return ListenerStats{Listener: l.name, Open: open, RefusedTotal: l.refusedTotal.Load(),
		RefusedPerAddr: l.refusedPerAddr.Load(), AcceptErrors: l.acceptErrors.Load()}
}

// hostOf returns the IP of a connection's remote address (the whole
// address when it has no port).
func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}

func onceFunc(f func()) func() {
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			f()
		}
	}
}

// TCPConn is an accepted TCP connection holding a listener slot. It embeds
// the *net.TCPConn, so every method of it (keepalive settings, vectored
// writes of net.Buffers, splice) stays available.
type TCPConn struct {
	*net.TCPConn
	release func()
}

// Close closes the connection and frees its slot.
func (c *TCPConn) Close() error {
	err := c.TCPConn.Close()
	c.release()
	return err
}

// NetConn returns the underlying connection.
func (c *TCPConn) NetConn() net.Conn { return c.TCPConn }

// Conn is an accepted connection of another kind holding a listener slot.
type Conn struct {
	net.Conn
	release func()
}

// Close closes the connection and frees its slot.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// NetConn returns the underlying connection.
func (c *Conn) NetConn() net.Conn { return c.Conn }
