package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// echoServer answers every line with the same line; it stops with the
// test.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes line and reads its echo within timeout.
func roundTrip(c net.Conn, r *bufio.Reader, line string, timeout time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func TestPassAndCount(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	for _, s := range []string{"one", "two", strings.Repeat("x", 100_000)} {
		if got, err := roundTrip(c, r, s, 5*time.Second); err != nil || got != s {
			t.Fatalf("echo of %d bytes: %d bytes, %v", len(s), len(got), err)
		}
	}
	if f, b := p.Forwarded(Forward), p.Forwarded(Backward); f != 100_009 || b != 100_009 {
		t.Errorf("forwarded %d and %d bytes, want 100009 each way (4+4+100001)", f, b)
	}
	if p.Accepted() != 1 {
		t.Errorf("accepted %d connections, want 1", p.Accepted())
	}
}

// TestHoldDeliversAfterHeal: while held nothing arrives, the connection
// stays open, and the heal delivers what was sent meanwhile, in order.
func TestHoldDeliversAfterHeal(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "before", 5*time.Second); err != nil || got != "before" {
		t.Fatalf("before the hold: %q %v", got, err)
	}
	p.Hold(Both)
	if got, err := roundTrip(c, r, "held", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("while held: got %q, %v; want a timeout", got, err)
	}
	// A connection opened during the hold is accepted but gets nothing.
	c2 := dial(t, p.Addr())
	r2 := bufio.NewReader(c2)
	if got, err := roundTrip(c2, r2, "new", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("new connection while held: got %q, %v; want a timeout", got, err)
	}
	p.Heal()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after the heal: %q %v, want the held line", got, err)
	}
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("new connection after the heal: %q %v", got, err)
	}
	if got, err := roundTrip(c, r, "after", 5*time.Second); err != nil || got != "after" {
		t.Fatalf("after the heal: %q %v", got, err)
	}
}

// TestHoldOneDirection: holding only the answers lets requests through.
func TestHoldOneDirection(t *testing.T) {
	got := make(chan string, 10)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			s, err := r.ReadString('\n')
			if err != nil {
				return
			}
			got <- s
			io.WriteString(c, s)
		}
	}()
	p := newProxy(t, ln.Addr().String())
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	p.Hold(Backward)
	if s, err := roundTrip(c, r, "ping", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("answers held: got %q, %v", s, err)
	}
	select {
	case s := <-got:
		if s != "ping\n" {
			t.Fatalf("server got %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request did not reach the server while only the answers were held")
	}
	p.Heal()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if s, err := r.ReadString('\n'); err != nil || s != "ping\n" {
		t.Fatalf("held answer after the heal: %q %v", s, err)
	}
}

// TestCutBothResets: open connections are reset, new ones refused until
// the heal; then connections work again.
func TestCutBothResets(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "before", 5*time.Second); err != nil || got != "before" {
		t.Fatalf("before the cut: %q %v", got, err)
	}
	p.Cut(Both)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("the open connection survived the cut: %v", err)
	}
	c2 := dial(t, p.Addr()) // the kernel completes the handshake; the proxy resets it
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a connection during the cut was not reset: %v", err)
	}
	p.Heal()
	c3 := dial(t, p.Addr())
	if got, err := roundTrip(c3, bufio.NewReader(c3), "after", 5*time.Second); err != nil || got != "after" {
		t.Fatalf("after the heal: %q %v", got, err)
	}
}

// TestCutOneDirectionDropsThenResets: a one-way cut drops that direction's
// bytes; the heal resets the connection, whose stream lost bytes.
func TestCutOneDirectionDropsThenResets(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	p.Cut(Forward)
	if got, err := roundTrip(c, r, "lost", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("forward cut: got %q, %v", got, err)
	}
	p.Heal()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if s, err := r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("a connection that lost bytes was not reset at the heal: %q %v", s, err)
	}
	c2 := dial(t, p.Addr())
	if got, err := roundTrip(c2, bufio.NewReader(c2), "after", 5*time.Second); err != nil || got != "after" {
		t.Fatalf("after the heal: %q %v", got, err)
	}
}

// TestSlowDelays: each way is delayed, the bytes arrive whole and in order.
func TestSlowDelays(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	p.Slow(Both, 150*time.Millisecond)
	start := time.Now()
	if got, err := roundTrip(c, r, "slow", 5*time.Second); err != nil || got != "slow" {
		t.Fatalf("slow echo: %q %v", got, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("a round trip over a link delayed 150 ms each way took %v", d)
	}
	var want bytes.Buffer
	for i := range 200 {
		want.WriteString(strings.Repeat(string(rune('a'+i%26)), 1000) + "\n")
	}
	go c.Write(want.Bytes())
	got := make([]byte, want.Len())
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("200 KB over the slow link: %v, equal %v", err, bytes.Equal(got, want.Bytes()))
	}
	p.Heal()
	start = time.Now()
	if got, err := roundTrip(c, r, "fast", 5*time.Second); err != nil || got != "fast" {
		t.Fatalf("after the heal: %q %v", got, err)
	}
	if d := time.Since(start); d >= 150*time.Millisecond {
		t.Errorf("after the heal a round trip took %v", d)
	}
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// lineFrame reads one line, newline included: the frames of the rewrite
// test.
func lineFrame(r *bufio.Reader) ([]byte, error) { return r.ReadBytes('\n') }

// TestRewriteFrames: the answers are rewritten frame by frame, also when
// a frame arrives in pieces; the requests pass unchanged.
func TestRewriteFrames(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.RewriteFrames(Backward, lineFrame, func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("leader=A"), []byte("leader=B")) })
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "x leader=A y", 5*time.Second); err != nil || got != "x leader=B y" {
		t.Fatalf("rewritten answer %q, %v", got, err)
	}
	// In two writes, split inside the pattern: the echo server may answer
	// each piece at once, and the frame is still rewritten whole.
	c.SetDeadline(time.Now().Add(5 * time.Second))
	sent := p.Forwarded(Forward)
	io.WriteString(c, "leader")
	// The first piece crosses on its own before the second is written.
	for deadline := time.Now().Add(5 * time.Second); p.Forwarded(Forward) < sent+int64(len("leader")); {
		if time.Now().After(deadline) {
			t.Fatal("the first piece did not cross the proxy")
		}
		time.Sleep(time.Millisecond)
	}
	io.WriteString(c, "=A\n")
	if got, err := r.ReadString('\n'); err != nil || got != "leader=B\n" {
		t.Fatalf("a frame in two pieces: %q, %v", got, err)
	}
	if f := p.Forwarded(Forward); f != int64(len("x leader=A y\n")+len("leader=A\n")) {
		t.Errorf("forwarded %d bytes of requests, unchanged they are %d", f, len("x leader=A y\n")+len("leader=A\n"))
	}
}
