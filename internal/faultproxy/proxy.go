// Package faultproxy is a TCP proxy for tests that injects network faults
// between two processes: it forwards every connection accepted on its
// loopback listener to a target address and, on command, cuts the link
// (resets every connection and refuses new ones, or drops the bytes of
// one direction), holds it (a blackhole: the bytes stay in the sockets'
// buffers and nothing is forwarded, so senders block once those fill, as
// across a partition), slows it (each chunk is delivered a delay after it
// was read, order kept), and heals it. It can also rewrite a direction
// frame by frame (RewriteFrames: the failover tests rewrite the
// controllers' redirects, and replication links' haAdvertisedAddress). A
// test points a process at the
// proxy's address instead of its peer's (an advertised or a dialed
// address) to put the link under its control.
//
// Only tests import it.
package faultproxy

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Dir is a direction of a link: Forward is from the side that dialed the
// proxy to the target, Backward the answers.
type Dir int

const (
	Forward Dir = 1 << iota
	Backward
	Both = Forward | Backward
)

type mode int

const (
	pass mode = iota
	drop      // bytes read and discarded
	hold      // nothing forwarded until a heal
)

// dirState is what one direction of every link does.
type dirState struct {
	mode  mode
	delay time.Duration
}

// Proxy forwards the connections accepted on its listener to its target.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	state   [2]dirState   // [0] Forward, [1] Backward
	refuse  bool          // Cut(Both): new connections are reset
	changed chan struct{} // closed and replaced at every state change
	links   map[*link]struct{}
	closed  bool

	frames [2]framing // per direction; set before traffic flows

	forwarded [2]atomic.Int64 // bytes written on, per direction
	accepted  atomic.Int64
	wg        sync.WaitGroup
}

// framing makes a direction carry whole frames, each rewritten.
type framing struct {
	read    func(*bufio.Reader) ([]byte, error)
	rewrite func([]byte) []byte
}

// RewriteFrames makes direction d (Forward or Backward) of every later
// connection read whole frames with read (it returns one frame, bytes
// and all) and deliver rewrite(frame) instead: a test changes what a
// protocol says in passing, such as an address that would lead a client
// around the proxy. Call it before any connection is made.
func (p *Proxy) RewriteFrames(d Dir, read func(*bufio.Reader) ([]byte, error), rewrite func([]byte) []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := 0
	if d == Backward {
		i = 1
	}
	p.frames[i] = framing{read: read, rewrite: rewrite}
}

// link is one proxied connection: the accepted one and the one to the
// target.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
	damaged        atomic.Bool // bytes were dropped: the stream has a gap
}

func (l *link) close(reset bool) {
	l.once.Do(func() {
		if reset {
			for _, c := range []net.Conn{l.client, l.server} {
				if tc, ok := c.(*net.TCPConn); ok {
					tc.SetLinger(0)
				}
			}
		}
		l.client.Close()
		l.server.Close()
		close(l.done)
	})
}

// New starts a proxy on a loopback port chosen now, forwarding to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, to give the side that dials.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Forwarded is the number of bytes the proxy delivered in direction d
// (Forward or Backward) since it started.
func (p *Proxy) Forwarded(d Dir) int64 {
	if d == Backward {
		return p.forwarded[1].Load()
	}
	return p.forwarded[0].Load()
}

// Accepted is the number of connections accepted since it started.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Cut cuts the link in d. Both: every open connection is reset and new
// ones are reset once accepted, until Heal. One direction: the bytes sent
// that way are read and discarded (the other direction still flows); a
// connection that lost bytes is reset at the heal, since its stream has
// a gap.
func (p *Proxy) Cut(d Dir) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d == Both {
		p.refuse = true
		for l := range p.links {
			go l.close(true)
		}
	}
	p.set(d, func(s *dirState) { s.mode = drop })
}

// Hold blackholes the link in d: connections stay open and new ones are
// accepted, but nothing is forwarded that way until Heal, which delivers
// what was held, in order.
func (p *Proxy) Hold(d Dir) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.set(d, func(s *dirState) { s.mode = hold })
}

// Slow delays every chunk sent in d by delay (0: no delay), keeping the
// order; it does not change a cut or a hold.
func (p *Proxy) Slow(d Dir, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.set(d, func(s *dirState) { s.delay = delay })
}

// Heal ends every cut, hold and delay: connections that lost bytes to a
// one-way cut are reset, held bytes are delivered.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = false
	for l := range p.links {
		if l.damaged.Load() {
			go l.close(true)
		}
	}
	p.set(Both, func(s *dirState) { *s = dirState{} })
}

// set changes the state of the directions in d; p.mu is held.
func (p *Proxy) set(d Dir, f func(*dirState)) {
	if d&Forward != 0 {
		f(&p.state[0])
	}
	if d&Backward != 0 {
		f(&p.state[1])
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// Close stops the listener, resets every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for l := range p.links {
		go l.close(true)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.mu.Lock()
		refuse, closed := p.refuse, p.closed
		p.mu.Unlock()
		if refuse || closed {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		if tc, ok := client.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		client.Close()
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.refuse {
		p.mu.Unlock()
		l.close(true)
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(l, 0, client, server) }()
	go func() { defer wg.Done(); p.pump(l, 1, server, client) }()
	wg.Wait()
	l.close(false)
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// chunk is bytes read from one side, due for delivery at a time.
type chunk struct {
	b   []byte
	due time.Time
}

// pump moves direction d of l from src to dst: a reader stamps each chunk
// with its due time, a writer delivers it then, unless the direction is
// held (it waits) or cut (it drops). The queue between them is bounded,
// so a held direction stops reading and the sender's socket buffers fill.
func (p *Proxy) pump(l *link, d int, src, dst net.Conn) {
	q := make(chan chunk, 16)
	p.mu.Lock()
	fr := p.frames[d]
	p.mu.Unlock()
	var br *bufio.Reader
	if fr.read != nil {
		br = bufio.NewReaderSize(src, 64<<10)
	}
	go func() {
		defer close(q)
		for {
			var b []byte
			var n int
			var err error
			if br != nil {
				b, err = fr.read(br)
				if len(b) > 0 && fr.rewrite != nil {
					b = fr.rewrite(b)
				}
				n = len(b)
			} else {
				b = make([]byte, 32<<10)
				n, err = src.Read(b)
			}
			if n > 0 {
				p.mu.Lock()
				delay := p.state[d].delay
				p.mu.Unlock()
				select {
				case q <- chunk{b: b[:n], due: time.Now().Add(delay)}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if !p.deliver(l, d, dst, c) {
			l.close(true)
			for range q { // let the reader end
			}
			return
		}
	}
	// The source ended: pass the end on to dst, as TCP would.
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	} else {
		l.close(false)
	}
}

// deliver writes c to dst when it is due, waiting while d is held; it
// reports false when the link is done or the write failed.
func (p *Proxy) deliver(l *link, d int, dst net.Conn, c chunk) bool {
	for {
		p.mu.Lock()
		st, changed := p.state[d], p.changed
		p.mu.Unlock()
		switch st.mode {
		case drop:
			l.damaged.Store(true)
			return true
		case hold:
			select {
			case <-changed:
				continue
			case <-l.done:
				return false
			}
		}
		if wait := time.Until(c.due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-changed: // a cut or a hold may have begun meanwhile
				t.Stop()
				continue
			case <-l.done:
				t.Stop()
				return false
			}
		}
		if _, err := dst.Write(c.b); err != nil {
			return false
		}
		p.forwarded[d].Add(int64(len(c.b)))
		return true
	}
}
