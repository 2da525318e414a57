package controller

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// One port per controller serves both raft (between the voters) and the
// remoting RPCs (brokers, the CLI). A raft connection starts with a
// handshake the remoting protocol can never begin with:
//
//	dialer → acceptor:  raftMagic(1) | idLen(1) | clusterID (idLen bytes)
//	acceptor → dialer:  handshakeOK(1) or handshakeRefused(1)
//
// A remoting frame starts with its big-endian length, whose first byte is
// 0 for frames below 16 MiB (controller frames are bounded far below). The
// acceptor refuses a raft peer presenting another cluster id, so that two
// clusters (a second bootstrap, a voter list naming the wrong hosts) never
// exchange raft traffic. A fresh node (no cluster id yet: it was never
// bootstrapped and never contacted) adopts the first id it is shown and
// keeps it durably before answering.
const (
	raftMagic        = 0xCE
	handshakeOK      = 0x01
	handshakeRefused = 0x02
	// handshakeTimeout bounds how long an accepted connection may take to
	// send its first bytes.
	handshakeTimeout = 5 * time.Second
	maxClusterIDLen  = 64
)

// errClusterRefused is what a dialer gets from a peer of another cluster.
var errClusterRefused = errors.New("controller: peer refused the raft connection (another cluster id)")

// mux splits one listener into the raft stream layer and the remoting
// listener.
type mux struct {
	ln        net.Listener
	advertise net.Addr
	log       *slog.Logger
	// clusterID returns the local id ("" on a fresh node); adopt keeps a
	// first id durably.
	clusterID func() string
	adopt     func(id string) error

	raftCh chan net.Conn
	rpcCh  chan net.Conn
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

func newMux(ln net.Listener, advertise string, log *slog.Logger, clusterID func() string, adopt func(string) error) (*mux, error) {
	addr, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("controller: advertised address %q: %w", advertise, err)
	}
	m := &mux{ln: ln, advertise: addr, log: log, clusterID: clusterID, adopt: adopt,
		raftCh: make(chan net.Conn), rpcCh: make(chan net.Conn), done: make(chan struct{})}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

func (m *mux) acceptLoop() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.log.Error("controller listener failed", "err", err)
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c)
		}()
	}
}

// route reads a connection's first byte and hands it on.
func (m *mux) route(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		c.Close()
		return
	}
	if first[0] != raftMagic {
		c.SetReadDeadline(time.Time{})
		m.hand(m.rpcCh, &prefixConn{Conn: c, first: first[0], pending: true})
		return
	}
	id, err := readClusterID(c)
	if err != nil {
		c.Close()
		return
	}
	local := m.clusterID()
	switch {
	case local == "" && id != "":
		if err := m.adopt(id); err != nil {
			m.log.Error("cannot keep the cluster id a raft peer presented", "cluster_id", id, "err", err)
			c.Close()
			return
		}
		m.log.Info("joined the controller cluster", "cluster_id", id, "peer", c.RemoteAddr().String())
	case local != id:
		m.log.Error("refused a raft connection from another controller cluster", "peer", c.RemoteAddr().String(),
			"peer_cluster_id", id, "cluster_id", local)
		c.Write([]byte{handshakeRefused})
		c.Close()
		return
	}
	if _, err := c.Write([]byte{handshakeOK}); err != nil {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Time{})
	m.hand(m.raftCh, c)
}

func readClusterID(c net.Conn) (string, error) {
	var n [1]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return "", err
	}
	if n[0] > maxClusterIDLen {
		return "", fmt.Errorf("controller: cluster id of %d bytes", n[0])
	}
	b := make([]byte, n[0])
	if _, err := io.ReadFull(c, b); err != nil {
		return "", err
	}
	return string(b), nil
}

func (m *mux) hand(ch chan net.Conn, c net.Conn) {
	select {
	case ch <- c:
	case <-m.done:
		c.Close()
	}
}

func (m *mux) close() {
	m.once.Do(func() {
		close(m.done)
		m.ln.Close()
	})
	m.wg.Wait()
}

// chanListener is a net.Listener fed by the mux.
type chanListener struct {
	m  *mux
	ch chan net.Conn
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

// Close does nothing: the mux owns the listener (closed by mux.close).
func (l *chanListener) Close() error   { return nil }
func (l *chanListener) Addr() net.Addr { return l.m.advertise }

// raftLayer is raft's StreamLayer over the mux.
type raftLayer struct{ chanListener }

func (l *raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	id := l.m.clusterID()
	c.SetDeadline(time.Now().Add(timeout))
	hello := append([]byte{raftMagic, byte(len(id))}, id...)
	var ans [1]byte
	if _, err := c.Write(hello); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("controller: raft handshake with %s: %w", addr, err)
	}
	if ans[0] != handshakeOK {
		c.Close()
		return nil, fmt.Errorf("%w: %s", errClusterRefused, addr)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// prefixConn gives back the byte the mux read to route a connection.
type prefixConn struct {
	net.Conn
	first   byte
	pending bool
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if c.pending && len(p) > 0 {
		c.pending = false
		p[0] = c.first
		return 1, nil
	}
	return c.Conn.Read(p)
}
