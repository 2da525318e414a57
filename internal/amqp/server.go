package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// Config is the AMQP listener's configuration.
type Config struct {
	// DataDir is the broker's data directory; definitions and
	// acknowledgement state live in DataDir/amqp.
	DataDir string
	// Users are the accounts PLAIN and AMQPLAIN authenticate against. Without
	// an account named guest, guest/guest is accepted from loopback
	// addresses only (RabbitMQ's rule).
	Users map[string]string
	// MaxFrameBytes is the frame-max offered in connection.tune.
	MaxFrameBytes uint32
	// MaxChannels is the channel-max offered in connection.tune.
	MaxChannels uint16
	// Heartbeat is the heartbeat interval offered in connection.tune (0: none).
	Heartbeat time.Duration
	// AckStateInterval bounds how long a settlement stays only in memory
	// before the acknowledgement state is written (a settlement lost in a
	// crash is a redelivery, never a loss).
	AckStateInterval time.Duration
	// FS is where the state files are written (default vfs.OS).
	FS vfs.FS
}

// Defaults.
const (
	DefaultMaxFrameBytes    = 128 << 10
	DefaultMaxChannels      = 2047
	DefaultHeartbeat        = 60 * time.Second
	DefaultAckStateInterval = 200 * time.Millisecond
	// handshakeTimeout bounds the negotiation up to connection.open-ok.
	handshakeTimeout = 10 * time.Second
	// writeTimeout bounds one write to a client.
	writeTimeout = 30 * time.Second
)

// Validate fills defaults and checks limits.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("amqp: DataDir is required")
	}
	if c.MaxFrameBytes == 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if c.MaxFrameBytes < 4096 {
		return fmt.Errorf("amqp: MaxFrameBytes %d below the protocol's minimum 4096", c.MaxFrameBytes)
	}
	if c.MaxChannels == 0 {
		c.MaxChannels = DefaultMaxChannels
	}
	if c.Heartbeat < 0 || c.Heartbeat > 65535*time.Second {
		return fmt.Errorf("amqp: Heartbeat %v out of range", c.Heartbeat)
	}
	if c.AckStateInterval <= 0 {
		c.AckStateInterval = DefaultAckStateInterval
	}
	if c.FS == nil {
		c.FS = vfs.OS{}
	}
	return nil
}

// Server is the AMQP 0-9-1 front door over one store.
type Server struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger
	dir   string
	vhost *vhost

	topics topicWatch // queues over Keel topics (topicqueue.go)

	mu     sync.Mutex
	conns  map[*conn]struct{}
	lns    []net.Listener
	closed bool

	stop chan struct{}
	wg   sync.WaitGroup
	// baseCtx ends at Close: the context of store puts and waits.
	baseCtx    context.Context
	cancelBase context.CancelFunc
}

// New opens the definitions and acknowledgement state under
// cfg.DataDir/amqp; it starts nothing.
func New(cfg Config, st *store.Store, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, store: st, log: log, dir: filepath.Join(cfg.DataDir, "amqp"),
		conns: map[*conn]struct{}{}, stop: make(chan struct{})}
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	if err := vfs.MkdirAllDurable(cfg.FS, s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("amqp: %w", err)
	}
	v, err := openVhost(s)
	if err != nil {
		return nil, err
	}
	s.vhost = v
	s.watchTopics()
	s.wg.Add(1)
	go s.persistLoop()
	return s, nil
}

// Serve accepts connections on ln until Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("amqp: accept: %w", err)
		}
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// Close stops accepting, closes every connection (their unacknowledged
// deliveries go back to their queues), writes the acknowledgement state
// and waits for every goroutine. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	close(s.stop)
	s.topics.remove()
	s.cancelBase()
	s.wg.Wait()
	s.vhost.trimLeases()
	return s.vhost.saveAcks()
}

// persistLoop writes the acknowledgement state when it changed, every
// AckStateInterval.
func (s *Server) persistLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.AckStateInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.vhost.saveAcks(); err != nil {
				s.log.Error("amqp: write acknowledgement state", "err", err)
			}
		}
	}
}

// authenticate checks a user's password. The guest account without a
// configured password works from loopback only.
func (s *Server) authenticate(user, pass string, remote net.Addr) bool {
	if want, ok := s.cfg.Users[user]; ok {
		return want == pass
	}
	if user != "guest" || pass != "guest" {
		return false
	}
	ta, ok := remote.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
