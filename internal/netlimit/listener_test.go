package netlimit

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a log sink safe for the listener's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveEcho accepts on l and keeps each connection open until it reads EOF.
func serveEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(io.Discard, c); c.Close() }()
	}
}

// refusedByServer reports whether the server closed c (EOF or reset)
// within a generous time: accepting may lag on a loaded machine.
func refusedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// waitOpen waits until l counts n open connections.
func waitOpen(t *testing.T, l *Listener, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().Open != n {
		if time.Now().After(deadline) {
			t.Fatalf("open %d, want %d", l.Stats().Open, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestListenerLimits(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	l := NewListener(raw, "test", Limits{MaxConns: 3, MaxConnsPerAddr: 2}, slog.New(slog.NewTextHandler(&logs, nil)))
	defer l.Close()
	go serveEcho(l)
	dial := func(local string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		c, err := d.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a1, a2 := dial("127.0.0.1"), dial("127.0.0.1")
	waitOpen(t, l, 2)
	a3 := dial("127.0.0.1") // third from one address
	if !refusedByServer(t, a3) {
		t.Fatal("a third connection from one address was kept (limit 2)")
	}
	b1 := dial("127.0.0.2")
	waitOpen(t, l, 3)
	b2 := dial("127.0.0.2") // fourth in all
	if !refusedByServer(t, b2) {
		t.Fatal("a fourth connection was kept (limit 3)")
	}
	st := l.Stats()
	if st.Open != 3 || st.RefusedPerAddr != 1 || st.RefusedTotal != 1 {
		t.Fatalf("stats %+v", st)
	}
	if !strings.Contains(logs.String(), "connection refused: limit reached") {
		t.Fatalf("no refusal logged:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), "connection refused"); n != 1 {
		t.Fatalf("%d refusal lines within LogInterval, want 1", n)
	}
	// A closed connection frees its slot.
	a1.Close()
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats().Open != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("slot not freed: %+v", l.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	a4 := dial("127.0.0.1")
	waitOpen(t, l, 3) // kept after a slot was freed
	for _, c := range []net.Conn{a2, a3, a4, b1, b2} {
		c.Close()
	}
}

// fakeListener fails its first accepts with EMFILE.
type fakeListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (f *fakeListener) Accept() (net.Conn, error) {
	f.mu.Lock()
	if f.fails > 0 {
		f.fails--
		f.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	f.mu.Unlock()
	return f.Listener.Accept()
}

func TestListenerKeepsAcceptingAfterEMFILE(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	l := NewListener(&fakeListener{Listener: raw, fails: 4}, "test", Limits{}, slog.New(slog.NewTextHandler(&logs, nil)))
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	start := time.Now()
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := <-accepted
	defer sc.Close()
	// Four failures back off 5+10+20+40 ms before the accept that works.
	if d := time.Since(start); d < 75*time.Millisecond {
		t.Fatalf("accepted after %v: the failures were not backed off", d)
	}
	if l.Stats().AcceptErrors != 4 || strings.Count(logs.String(), "accept failed") != 1 {
		t.Fatalf("stats %+v, log:\n%s", l.Stats(), logs.String())
	}
	// Close ends Accept.
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	l.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

// An accepted TCP connection keeps the *net.TCPConn's methods: net.Buffers
// is written with one vectored write (checked by the method set), and
// keepalive can be set.
func TestListenerConnKeepsTCPMethods(t *testing.T) {
	raw, _ := net.Listen("tcp", "127.0.0.1:0")
	l := NewListener(raw, "test", Limits{MaxConns: 1}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer l.Close()
	go func() {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(interface {
		SetKeepAliveConfig(net.KeepAliveConfig) error
	}); !ok {
		t.Fatalf("%T lost SetKeepAliveConfig", c)
	}
	if _, ok := c.(io.ReaderFrom); !ok {
		t.Fatalf("%T lost ReadFrom", c)
	}
	bufs := net.Buffers{[]byte("a"), []byte("b")}
	if _, err := bufs.WriteTo(c); err != nil {
		t.Fatal(err)
	}
}
