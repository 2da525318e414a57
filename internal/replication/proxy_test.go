package replication

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// linkProxy is a loopback TCP proxy between a slave and its master that
// injects link faults: drop every connection, stall both directions or
// only the slave's acknowledgements (slave -> master), slow every chunk,
// or flip one byte of the master's stream.
type linkProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	stall   atomic.Bool  // forward nothing either way
	cutAcks atomic.Bool  // forward nothing from the slave
	delay   atomic.Int64 // per forwarded chunk (ns)
	flip    atomic.Bool  // flip a byte of the next chunk from the master

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newLinkProxy(t *testing.T, target string) *linkProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{t: t, ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *linkProxy) addr() string { return p.ln.Addr().String() }

func (p *linkProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		m, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, m)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(m, c, false) // slave -> master
		go p.pump(c, m, true)  // master -> slave
	}
}

// pump forwards src to dst until either ends, then closes both.
func (p *linkProxy) pump(dst, src net.Conn, fromMaster bool) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for p.stall.Load() || (!fromMaster && p.cutAcks.Load()) {
				time.Sleep(time.Millisecond)
			}
			if d := p.delay.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			if fromMaster && p.flip.CompareAndSwap(true, false) {
				buf[n/2] ^= 0xFF
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				p.t.Logf("proxy: %v", err)
			}
			return
		}
	}
}

// drop closes every connection through the proxy.
func (p *linkProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *linkProxy) heal() {
	p.stall.Store(false)
	p.cutAcks.Store(false)
	p.delay.Store(0)
	p.flip.Store(false)
}

func (p *linkProxy) close() {
	p.heal()
	p.ln.Close()
	p.drop()
	p.wg.Wait()
}
