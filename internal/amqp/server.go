package amqp

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/doorstats"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// FrameBudget is the broker-wide budget of bytes held by requests being
// read (internal/netlimit's Door is one).
type FrameBudget interface {
	ClaimBytes(n int64, done <-chan struct{}) bool
	// TryClaimBytes takes n bytes only if they fit now.
	TryClaimBytes(n int64) bool
	ReleaseBytes(n int64)
	CapacityBytes() int64
}

// Config is the AMQP listener's configuration.
type Config struct {
	// DataDir is the broker's data directory; definitions and
	// acknowledgement state live in DataDir/amqp.
	DataDir string
	// Users are the accounts PLAIN and AMQPLAIN authenticate against when
	// Accounts is nil. Without an account named guest, guest/guest is
	// accepted from loopback addresses only (RabbitMQ's rule).
	Users map[string]string
	// Accounts, if set, returns the ACL accounts in force (plain_acl.yml):
	// users are access keys, passwords their secret keys, and methods are
	// checked against their permissions (auth.go). Users and guest are
	// then not accepted. A connection whose password the rules returned
	// later no longer accept is closed (revoke.go).
	Accounts func() *acl.Rules
	// PeerAccount, with Accounts, is the account (an access key) the door
	// logs in to other groups' doors as for what no client connection
	// carries (dead-letter copies, deadletter_remote.go), with its secret
	// as Accounts returns it at each dial; "" or without Accounts: guest.
	PeerAccount string
	// MaxFrameBytes is the frame-max offered in connection.tune.
	MaxFrameBytes uint32
	// FrameBudget, if set, is claimed each frame's bytes (after the
	// handshake) once its header has arrived and before its payload is
	// read, and given them back once the frame is handled (a broker-wide
	// request budget): ClaimBytes waits while they do not fit and reports
	// false if done closes first (the server is closing). A message's
	// body is claimed whole when its content header arrives and held
	// until the message is stored or dropped (publish.go's reserveBody).
	FrameBudget FrameBudget
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
	// ConsumerTimeout closes a channel with 406 once a delivery on it has
	// waited that long for its acknowledgement (RabbitMQ's
	// consumer_timeout; the delivery goes back to its queue). 0: the
	// default, 30 minutes; negative: never.
	ConsumerTimeout time.Duration
	// MaxMessageBytes bounds a published message's body (RabbitMQ's
	// max_message_size; at most 512 MiB and at most what the store takes
	// in one record, Store.MaxRecordBodyBytes; 0: 128 MiB or that, the
	// smaller). A body is held in memory while it arrives, growing with its
	// frames.
	MaxMessageBytes int
	// Vhosts are the virtual hosts served besides "/", each with its own
	// queues, exchanges and files (DataDir/amqp/vhosts/<name in hex>).
	Vhosts []string
	// Traffic, when set, counts connections, methods, errors and bytes
	// (the metrics' door series); Observer, when set, is told of every
	// publish and delivery (observe.go).
	Traffic  *doorstats.Counters
	Observer Observer
	// Cluster, when set, names the other broker groups' doors: queues
	// homed there are used through this door (forward.go). Group is
	// this member's group (brokerName), required with Cluster.
	Cluster Cluster
	Group   string
	// SystemRecords makes a master serving slaves write every change of
	// its durable definitions and acknowledgement state to the CommitLog
	// as system records (replicate.go), so that its slaves have them.
	SystemRecords bool
}

// Defaults.
const (
	DefaultMaxFrameBytes    = 128 << 10
	DefaultMaxChannels      = 2047
	DefaultHeartbeat        = 60 * time.Second
	DefaultAckStateInterval = 200 * time.Millisecond
	DefaultConsumerTimeout  = 30 * time.Minute
	DefaultMaxMessageBytes  = 128 << 20
	// MaxMaxMessageBytes is RabbitMQ's ceiling of max_message_size.
	MaxMaxMessageBytes = 512 << 20
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
	if c.Cluster != nil && c.Group == "" {
		return errors.New("amqp: Group is required with Cluster")
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
	if c.ConsumerTimeout == 0 {
		c.ConsumerTimeout = DefaultConsumerTimeout
	}
	if c.FS == nil {
		c.FS = vfs.OS{}
	}
	if c.MaxMessageBytes < 0 || c.MaxMessageBytes > MaxMaxMessageBytes {
		return fmt.Errorf("amqp: MaxMessageBytes %d out of [1, %d]", c.MaxMessageBytes, MaxMaxMessageBytes)
	}
	seen := map[string]bool{defaultVhost: true}
	for _, v := range c.Vhosts {
		if v == "" || len(v) > 255 || !utf8.ValidString(v) {
			return fmt.Errorf("amqp: vhost %q: want 1 to 255 bytes of UTF-8", v)
		}
		if seen[v] {
			return fmt.Errorf("amqp: vhost %q listed twice (\"/\" is always served)", v)
		}
		seen[v] = true
	}
	return nil
}

// Server is the AMQP 0-9-1 front door over one store.
type Server struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger
	dir   string
	// vhosts are the virtual hosts served: "/" and Config.Vhosts; fixed
	// at New.
	vhosts map[string]*vhost
	// sys writes the system records (Config.SystemRecords; nil: none).
	sys *sysLog
	// work runs dead-letter copies in order (deadletter.go).
	work *worker
	// blocked: connection.blocked was sent (the store refuses writes).
	blocked atomic.Bool

	topics topicWatch // queues over Keel topics (topicqueue.go)

	mu     sync.Mutex
	conns  map[*conn]struct{}
	lns    []net.Listener
	closed bool

	stop chan struct{}
	// homes caches where queues not declared here live (forward.go).
	homes homes
	// dialFailures limits the log of failed dials to other groups'
	// doors (forward_client.go).
	dialFailures dialLog
	// claims are the names this member arbitrates (claim.go).
	claims claims
	// remoteDL sends dead-letter copies to other groups' queues
	// (deadletter_remote.go).
	remoteDL remoteDL
	// sweepWake wakes a parked sweep (deadletter.go): a connection was
	// accepted or a queue created.
	sweepWake chan struct{}
	// sweepParked: the sweep is parked (tests wait for it).
	sweepParked atomic.Bool
	// ackWake wakes a parked persistLoop: a queue's acknowledgement state
	// changed; acksParked: it is parked (tests wait for it).
	ackWake    chan struct{}
	acksParked atomic.Bool
	wg         sync.WaitGroup
	// baseCtx ends at Close: the context of store puts and waits.
	baseCtx    context.Context
	cancelBase context.CancelFunc
}

// New opens the definitions and acknowledgement state under
// cfg.DataDir/amqp and starts the server's background work (persisting
// acknowledgement state, the expiry sweep, the work queue, and with
// Config.Accounts the secrets' check), which Close stops; it accepts no
// connection before Serve.
func New(cfg Config, st *store.Store, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = min(DefaultMaxMessageBytes, st.MaxRecordBodyBytes())
	}
	if limit := st.MaxRecordBodyBytes(); cfg.MaxMessageBytes > limit {
		return nil, fmt.Errorf("amqp: MaxMessageBytes %d is above the %d bytes the store takes in one record (its MaxRecordBodyBytes)", cfg.MaxMessageBytes, limit)
	}
	s := &Server{cfg: cfg, store: st, log: log, dir: filepath.Join(cfg.DataDir, "amqp"),
		conns: map[*conn]struct{}{}, stop: make(chan struct{}), sweepWake: make(chan struct{}, 1), ackWake: make(chan struct{}, 1), work: newWorker()}
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	if err := vfs.MkdirAllDurable(cfg.FS, s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("amqp: %w", err)
	}
	if err := s.openClaims(); err != nil { // claim.go
		return nil, err
	}
	s.vhosts = map[string]*vhost{}
	for _, name := range append([]string{defaultVhost}, cfg.Vhosts...) {
		v, err := openVhost(s, name, vhostDir(s.dir, name))
		if err != nil {
			return nil, err
		}
		s.vhosts[name] = v
		v.initSysLog()
	}
	if cfg.SystemRecords {
		s.sys = newSysLog(st)
	}
	st.SetQueueHolds(s.holds) // retention keeps every unsettled message (retention.go)
	s.watchTopics()
	s.wg.Add(3)
	go s.persistLoop()
	go s.sweep()
	go func() {
		defer s.wg.Done()
		s.work.run(s.stop)
	}()
	if cfg.Accounts != nil {
		s.wg.Add(1)
		go s.watchAccounts() // revoke.go
	}
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
		s.cfg.Traffic.Accept()
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			s.cfg.Traffic.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.wakeSweep()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			s.cfg.Traffic.Close()
		}()
	}
}

// CloseConnections sends connection.close with code and reason on every
// open connection, so that clients learn why before their sockets close
// (Close closes them; it does not wait for the clients' close-ok). A
// connection still negotiating is left to Close. Each write is bounded by
// a second.
func (s *Server) CloseConnections(code uint16, reason string) {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	deadline := time.Now().Add(time.Second)
	for _, c := range conns {
		if c.shown.Load() == nil {
			continue
		}
		c.nc.SetWriteDeadline(deadline)
		if err := c.send(0, &wire.ConnectionClose{ReplyCode: code, ReplyText: reason}); err != nil {
			s.log.Debug("amqp: connection.close not sent", "err", err)
		}
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
	s.store.SetQueueHolds(nil)
	var errs []error
	for _, v := range s.vhosts {
		v.trimLeases()
		errs = append(errs, v.saveAcks())
	}
	return errors.Join(errs...)
}

// defaultVhost is the vhost every broker serves; its files are in
// DataDir/amqp itself.
const defaultVhost = "/"

// vhostDir is where a vhost's files are: DataDir/amqp for "/", else
// DataDir/amqp/vhosts/<the name in hex> (any UTF-8 name is a safe
// directory name that way).
func vhostDir(dir, name string) string {
	if name == defaultVhost {
		return dir
	}
	return filepath.Join(dir, "vhosts", hex.EncodeToString([]byte(name)))
}

// vhostList names the vhosts served, for an error message.
func (s *Server) vhostList() string {
	names := make([]string, 0, len(s.vhosts))
	for n := range s.vhosts {
		names = append(names, strconv.Quote(n))
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// persistLoop writes the acknowledgement state when it changed, every
// AckStateInterval. A round with nothing changed parks it, its ticker
// stopped, until a queue's state changes (wakeAcks): that change is then
// written AckStateInterval later at the latest, as when it ticks.
func (s *Server) persistLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.AckStateInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		changed := false
		for _, v := range s.vhosts {
			c, err := v.saveChangedAcks()
			if err != nil {
				s.log.Error("amqp: write acknowledgement state", "vhost", v.name, "err", err)
			}
			changed = changed || c
		}
		if changed {
			continue
		}
		t.Stop()
		s.acksParked.Store(true)
		select {
		case <-s.stop:
			return
		case <-s.ackWake:
		}
		s.acksParked.Store(false)
		t.Reset(s.cfg.AckStateInterval)
	}
}

// wakeAcks wakes a parked persistLoop.
func (s *Server) wakeAcks() {
	select {
	case s.ackWake <- struct{}{}:
	default:
	}
}
