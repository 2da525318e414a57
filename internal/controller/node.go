package controller

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/vfs"
)

// Defaults (docs/configuration.md, controller keys).
const (
	DefaultDetectionPeriod = 6 * time.Second
	DefaultScanInterval    = 500 * time.Millisecond
	DefaultFenceTimeout    = time.Second
	DefaultApplyTimeout    = 5 * time.Second
	// MaxFrameBytes bounds every remoting frame a controller reads or
	// writes (a status of many groups is the largest).
	MaxFrameBytes = 8 << 20
)

// Voter is one raft voter: its id and the address (raft and RPC share
// it) others dial.
type Voter struct {
	ID   string
	Addr string
}

// ParseVoters reads a voter list in RocketMQ's controllerDLegerPeers form,
// "n0-127.0.0.1:9878;n1-127.0.0.1:9868", or as plain addresses separated
// by ';' or ',' (then each address is its own id).
func ParseVoters(s string) ([]Voter, error) {
	var vs []Voter
	seen := map[string]bool{}
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' }) {
		part = strings.TrimSpace(part)
		v := Voter{ID: part, Addr: part}
		if id, addr, ok := strings.Cut(part, "-"); ok && !strings.Contains(id, ":") {
			v = Voter{ID: id, Addr: addr}
		}
		if _, _, err := net.SplitHostPort(v.Addr); err != nil || v.ID == "" {
			return nil, fmt.Errorf("controller: voter %q: want id-host:port or host:port", part)
		}
		if seen[v.ID] || seen["addr "+v.Addr] {
			return nil, fmt.Errorf("controller: voter %q listed twice", part)
		}
		seen[v.ID], seen["addr "+v.Addr] = true, true
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		return nil, errors.New("controller: empty voter list")
	}
	return vs, nil
}

// Config configures a controller node.
type Config struct {
	// NodeID is this voter's raft id (controllerDLegerSelfId); default
	// Addr.
	NodeID string
	// Addr is the address the other voters, brokers and the CLI dial; it
	// must reach Listener.
	Addr string
	// Listener is bound by the caller (raft and RPC share it).
	Listener net.Listener
	// DataDir holds the raft log (raft.db), snapshots and the cluster id.
	DataDir string
	// Bootstrap, if set, makes this node bootstrap a new cluster of these
	// voters (it must be one of them). Refused when DataDir already holds
	// state: bootstrapping is done once, on one node.
	Bootstrap []Voter

	// DetectionPeriod (D): a master silent this long is replaced; a new
	// raft leader also waits D before its first election.
	DetectionPeriod time.Duration
	ScanInterval    time.Duration // how often the leader checks the groups
	FenceTimeout    time.Duration // how long a fence waits for the candidates
	// AllowUnclean (enableElectUncleanMaster) lets the leader elect a
	// replica outside the in-sync set of any group when no member
	// answers; a group's AllowUnclean does the same for one group.
	AllowUnclean bool
	// NotifyRoleChange sends every replica of a group the new view after
	// an election (notifyBrokerRoleChanged); brokers also poll.
	NotifyRoleChange bool
	// LeaseDuration (controllerLeaseMillis) is the lease an ASYNC_MASTER
	// is granted by each heartbeat answer (lease.go); default
	// DetectionPeriod/2. It must leave room for its drift margin below
	// DetectionPeriod: LeaseDuration + LeaseMargin(LeaseDuration) <= D.
	LeaseDuration time.Duration

	// Raft timing; zero values take raft's defaults (1 s, 1 s, 500 ms).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration

	Clock   Clock   // default: the wall clock
	Brokers Brokers // how the leader reaches brokers; default: remoting
	Logger  *slog.Logger
}

func (c *Config) withDefaults() error {
	if c.Addr == "" || c.Listener == nil || c.DataDir == "" {
		return errors.New("controller: Addr, Listener and DataDir are required")
	}
	if c.NodeID == "" {
		c.NodeID = c.Addr
	}
	if c.DetectionPeriod <= 0 {
		c.DetectionPeriod = DefaultDetectionPeriod
	}
	if c.ScanInterval <= 0 {
		c.ScanInterval = DefaultScanInterval
	}
	if c.FenceTimeout <= 0 {
		c.FenceTimeout = DefaultFenceTimeout
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = c.DetectionPeriod / 2
	}
	if c.LeaseDuration+LeaseMargin(c.LeaseDuration) > c.DetectionPeriod {
		return fmt.Errorf("controller: a lease of %v plus its margin %v is above the detection period %v",
			c.LeaseDuration, LeaseMargin(c.LeaseDuration), c.DetectionPeriod)
	}
	if c.Clock == nil {
		c.Clock = wallClock{}
	}
	if c.Brokers == nil {
		c.Brokers = RemotingBrokers{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Bootstrap != nil {
		self := false
		for _, v := range c.Bootstrap {
			self = self || v.ID == c.NodeID
		}
		if !self {
			return fmt.Errorf("controller: bootstrap voters do not include this node (id %q)", c.NodeID)
		}
	}
	return nil
}

// ErrAlreadyBootstrapped refuses a bootstrap over existing state.
var ErrAlreadyBootstrapped = errors.New("controller: already bootstrapped")

// Files in DataDir.
const (
	lockFile      = "LOCK"
	clusterIDFile = "cluster-id"
	raftDBFile    = "raft.db"
	snapshotsDir  = "snapshots"
)

// Controller is one voter of the controller cluster.
type Controller struct {
	cfg  Config
	log  *slog.Logger
	fsm  *FSM
	raft *raft.Raft
	mux  *mux
	rpc  *remoting.Server
	lock io.Closer
	bolt *raftboltdb.BoltStore

	idMu      sync.Mutex
	clusterID string // local copy, kept in DataDir/cluster-id

	obsCh    chan raft.Observation
	observer *raft.Observer
	wake     chan struct{} // leadership changed

	lead leaderState // the leader's soft state (leader.go)

	closeOnce sync.Once
	closed    chan struct{}
	// spawnMu orders spawn against Close: no goroutine starts once Close
	// began waiting for them.
	spawnMu  sync.Mutex
	stopping bool
	wg       sync.WaitGroup
}

// spawn runs fn on a goroutine Close waits for; after Close it does not
// run fn.
func (c *Controller) spawn(fn func()) {
	c.spawnMu.Lock()
	defer c.spawnMu.Unlock()
	if c.stopping {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn()
	}()
}

// Open opens (or bootstraps) the node's state and starts raft and the
// listener; Run then runs the leader's duties.
func Open(cfg Config) (*Controller, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, log: cfg.Logger, fsm: NewFSM(), wake: make(chan struct{}, 1), closed: make(chan struct{})}
	if err := vfs.MkdirAllDurable(vfs.OS{}, cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	lock, err := vfs.OS{}.Lock(filepath.Join(cfg.DataDir, lockFile))
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	c.lock = lock
	if err := c.open(); err != nil {
		if c.raft != nil {
			c.raft.Shutdown().Error()
		}
		if c.mux != nil {
			c.mux.close()
		}
		c.closeStores()
		return nil, err
	}
	return c, nil
}

func (c *Controller) open() error {
	cfg := &c.cfg
	id, err := os.ReadFile(filepath.Join(cfg.DataDir, clusterIDFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("controller: %w", err)
	}
	c.clusterID = strings.TrimSpace(string(id))
	c.bolt, err = raftboltdb.NewBoltStore(filepath.Join(cfg.DataDir, raftDBFile))
	if err != nil {
		return fmt.Errorf("controller: open raft log: %w", err)
	}
	hlog := hclogFor(c.log)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(cfg.DataDir, snapshotsDir), 2, hlog)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	has, err := raft.HasExistingState(c.bolt, c.bolt, snaps)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if cfg.Bootstrap != nil && (has || c.clusterID != "") {
		id := c.clusterID
		if id == "" {
			id = "(unknown)"
		}
		return fmt.Errorf("%w: %s already holds controller state (cluster %s); start without --bootstrap", ErrAlreadyBootstrapped, cfg.DataDir, id)
	}
	m, err := newMux(cfg.Listener, cfg.Addr, c.log, c.ClusterID, c.adoptClusterID)
	if err != nil {
		return err
	}
	c.mux = m
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: &raftLayer{chanListener{m: m, ch: m.raftCh}}, MaxPool: 3, Timeout: 5 * time.Second, Logger: hlog})
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hlog
	if cfg.HeartbeatTimeout > 0 {
		rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	}
	if cfg.ElectionTimeout > 0 {
		rc.ElectionTimeout = cfg.ElectionTimeout
	}
	if cfg.LeaderLeaseTimeout > 0 {
		rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	}
	if cfg.Bootstrap != nil {
		if err := c.bootstrap(rc, snaps, trans); err != nil {
			return err
		}
	} else if !has {
		c.log.Info("controller has no state: waiting to be contacted by a bootstrapped cluster listing it", "node_id", cfg.NodeID)
	}
	c.raft, err = raft.NewRaft(rc, c.fsm, c.bolt, c.bolt, snaps, trans)
	if err != nil {
		return fmt.Errorf("controller: start raft: %w", err)
	}
	c.obsCh = make(chan raft.Observation, 16)
	c.observer = raft.NewObserver(c.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	c.raft.RegisterObserver(c.observer)
	c.rpc = remoting.NewServer(remoting.ServerConfig{MaxFrameBytes: MaxFrameBytes, Logger: c.log}, c.Handler())
	c.spawn(func() { c.rpc.Serve(&chanListener{m: m, ch: m.rpcCh}) })
	c.spawn(c.watchObservations)
	return nil
}

// bootstrap writes a new cluster id and the first raft configuration.
// The caller checked that the node holds no state.
func (c *Controller) bootstrap(rc *raft.Config, snaps raft.SnapshotStore, trans raft.Transport) error {
	id := newUUID()
	if err := c.adoptClusterID(id); err != nil {
		return err
	}
	var conf raft.Configuration
	for _, v := range c.cfg.Bootstrap {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v.ID), Address: raft.ServerAddress(v.Addr)})
	}
	if err := raft.BootstrapCluster(rc, c.bolt, c.bolt, snaps, trans, conf); err != nil {
		return fmt.Errorf("controller: bootstrap: %w", err)
	}
	c.log.Info("bootstrapped a new controller cluster", "cluster_id", id, "voters", len(conf.Servers))
	return nil
}

// ClusterID is the cluster id this node keeps ("" on a fresh node).
func (c *Controller) ClusterID() string {
	c.idMu.Lock()
	defer c.idMu.Unlock()
	return c.clusterID
}

// adoptClusterID keeps a first cluster id durably; a different id once one
// is kept is refused.
func (c *Controller) adoptClusterID(id string) error {
	c.idMu.Lock()
	defer c.idMu.Unlock()
	if c.clusterID != "" {
		if c.clusterID == id {
			return nil
		}
		return fmt.Errorf("%w: this node belongs to %s, not %s", ErrClusterMismatch, c.clusterID, id)
	}
	if len(id) == 0 || len(id) > maxClusterIDLen {
		return fmt.Errorf("%w: cluster id %q", ErrInvalidCommand, id)
	}
	if err := vfs.WriteFileDurable(vfs.OS{}, filepath.Join(c.cfg.DataDir, clusterIDFile), []byte(id+"\n"), 0o644); err != nil {
		return fmt.Errorf("controller: keep cluster id: %w", err)
	}
	c.clusterID = id
	return nil
}

func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// watchObservations wakes the leader loop at each leadership change
// (non-blocking: raft never waits for us; the loop also polls State).
func (c *Controller) watchObservations() {
	for {
		select {
		case <-c.obsCh:
			select {
			case c.wake <- struct{}{}:
			default:
			}
		case <-c.closed:
			return
		}
	}
}

// Close stops the node: raft, the RPC server, the listener, the stores.
// It is idempotent.
func (c *Controller) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		if c.raft != nil {
			c.raft.DeregisterObserver(c.observer)
			err = c.raft.Shutdown().Error()
		}
		if c.rpc != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c.rpc.Shutdown(ctx)
			cancel()
		}
		if c.mux != nil {
			c.mux.close()
		}
		c.spawnMu.Lock()
		c.stopping = true
		c.spawnMu.Unlock()
		c.wg.Wait()
		c.closeStores()
	})
	return err
}

func (c *Controller) closeStores() {
	if c.bolt != nil {
		c.bolt.Close()
	}
	if c.lock != nil {
		c.lock.Close()
	}
}

// Addr is the node's advertised address.
func (c *Controller) Addr() string { return c.cfg.Addr }

// NodeID is the node's raft id.
func (c *Controller) NodeID() string { return c.cfg.NodeID }

// FSM is the node's state machine (read-only use).
func (c *Controller) FSM() *FSM { return c.fsm }

// LeaderAddr is the address of the raft leader as this node knows it ("" if
// none).
func (c *Controller) LeaderAddr() string {
	addr, _ := c.raft.LeaderWithID()
	return string(addr)
}

// apply proposes a command and waits for its result. An error that leaves
// the outcome unknown (leadership lost mid-way) is ErrNotLeader: the
// caller re-sends to the new leader, which is safe since every command is
// a compare-and-set.
func (c *Controller) apply(cmd *Command) (*Result, error) {
	if err := cmd.validate(); err != nil {
		return nil, err
	}
	b, err := encodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	f := c.raft.Apply(b, DefaultApplyTimeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrEnqueueTimeout) ||
			errors.Is(err, raft.ErrRaftShutdown) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return nil, &NotLeaderError{Leader: c.LeaderAddr()}
		}
		return nil, fmt.Errorf("controller: apply: %w", err)
	}
	r, ok := f.Response().(*Result)
	if !ok {
		return nil, fmt.Errorf("controller: apply returned %T", f.Response())
	}
	if cmd.Elect != nil && r.Err == nil {
		c.countElection(cmd.Elect.Kind)
	}
	return r, nil
}

// hclogFor routes raft's log lines into the node's logger one level down
// (raft's errors are warnings here, its warnings info, its info debug):
// raft warns of routine churn (a follower's first contact, an election
// starting), and the node logs what matters (acting, stepping down,
// elections of masters) itself.
func hclogFor(log *slog.Logger) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "raft", Output: io.Discard, Level: hclog.Off})
	l.RegisterSink(raftSink{log})
	return l
}

type raftSink struct{ log *slog.Logger }

func (s raftSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	lv := slog.LevelDebug
	switch level {
	case hclog.Error:
		lv = slog.LevelWarn
	case hclog.Warn:
		lv = slog.LevelInfo
	case hclog.Trace:
		return
	}
	s.log.Log(context.Background(), lv, name+": "+msg, args...)
}
