package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/doorstats"
	"github.com/keelmq/keel/internal/netlimit"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Config is the Kafka front door's configuration.
type Config struct {
	// AdvertisedHost and AdvertisedPort are what Metadata tells clients to
	// dial (Kafka's advertised.listeners); an empty host becomes
	// 127.0.0.1, a zero port the listener's.
	AdvertisedHost string
	AdvertisedPort int32
	// ClusterID is Metadata's cluster id.
	ClusterID string
	// NodeID is this broker's Kafka node id (0 by default), Group its
	// broker group (brokerName) and BrokerID its id there (0: the master).
	NodeID   int32
	Group    string
	BrokerID int64
	// Cluster, when set, is the cluster this broker is a member of
	// (cluster.go): Metadata lists its brokers and partitions, and this
	// broker serves only the partitions it leads. Nil: the broker is
	// alone, leader of every partition (a topic's partitions its queues).
	Cluster Cluster
	// Rack is this member's rack (kafkaBrokerRack; "": none), in
	// Metadata: a consumer of the same client.rack is told to fetch from
	// a slave of this rack (follower fetching, follower.go).
	Rack string
	// Follower: this door is a slave's. It serves what a consumer needs
	// to read from it — ApiVersions, Metadata (creating nothing), Fetch of
	// its group's partitions up to what the master confirmed (not
	// read_committed: txnmarker.go's servesCommitted),
	// FindCoordinator, DescribeCluster, SASL — and closes a connection
	// sending anything else (follower.go).
	Follower bool
	// Peers, with Cluster, reaches the other broker groups' masters: the
	// committed offsets of their partitions live there (offsets.go).
	// Nil: those partitions' offsets cannot be committed or read here
	// (COORDINATOR_NOT_AVAILABLE).
	Peers Peers
	// LocalGroup, when set, reports this broker's replication epoch and,
	// on a master, its in-sync replicas (Metadata's leader epoch and ISR
	// for its own group). It must be cheap.
	LocalGroup func() LocalGroup
	// EpochHistory, when set, returns this master's epoch history (the
	// replication's: each epoch and the CommitLog offset it started
	// writing at, oldest first): OffsetsForLeaderEpoch answers from it,
	// and produced batches carry its last epoch as their
	// partitionLeaderEpoch (epochs.go). It must be cheap.
	EpochHistory func() []EpochStart
	// Replaced, when set, reports that this master does not lead now: it
	// learned a newer master of its group (a controller fenced it above
	// its epoch), or, an ASYNC_MASTER, it holds no lease from the
	// controllers. While it does, it leads nothing, and Produce, Fetch,
	// ListOffsets and DeleteRecords answer NOT_LEADER_OR_FOLLOWER so
	// clients refresh their metadata. It must be cheap.
	Replaced func() bool
	// MaxRequestBytes bounds one request frame (default 16 MiB).
	MaxRequestBytes int
	// MaxBatchBytes bounds one produced record batch (Kafka's
	// max.message.bytes; default 4 MiB, the core's maxMessageSize).
	MaxBatchBytes int
	// MaxConns bounds open client connections (default 4096); more are
	// closed at once.
	MaxConns int
	// MaxFetchBytes bounds a Fetch response's records, whatever the
	// request's max_bytes asks (Kafka's fetch.max.bytes; default 55 MiB):
	// a Fetch gives its request budget back before it waits, so this is
	// what bounds the response it builds.
	MaxFetchBytes int
	// MaxWait bounds a Fetch's max_wait_ms (default 30 s).
	MaxWait time.Duration
	// IdleTimeout closes a connection that sends nothing for this long
	// (default 10 min, Kafka's connections.max.idle.ms).
	IdleTimeout time.Duration
	// RetentionMs and SegmentBytes are what DescribeConfigs reports for
	// retention.ms and segment.bytes (the broker's fileReservedTime and
	// CommitLog segment size; defaults 72 h and 1 GiB).
	RetentionMs  int64
	SegmentBytes int64
	// RetentionCheckInterval is how often topics' retention.ms and
	// retention.bytes are applied (Kafka's
	// log.retention.check.interval.ms; default 5 min).
	RetentionCheckInterval time.Duration
	// ProducerIDExpiration forgets an idempotent producer that has not
	// produced to a partition for this long (Kafka's
	// producer.id.expiration.ms; default 24 h).
	ProducerIDExpiration time.Duration
	// InitialRebalanceDelay delays the first rebalance of an empty
	// consumer group so that members starting together join one
	// generation (Kafka's group.initial.rebalance.delay.ms; broker.conf's
	// default is 3 s; zero here: no delay).
	InitialRebalanceDelay time.Duration
	// ConsumerGroupSessionTimeout and ConsumerGroupHeartbeatInterval are a
	// KIP-848 consumer group member's session timeout and the heartbeat
	// interval it is told (Kafka's group.consumer.session.timeout.ms and
	// group.consumer.heartbeat.interval.ms; zero: their defaults, 45 s and
	// 5 s; group848.go).
	ConsumerGroupSessionTimeout    time.Duration
	ConsumerGroupHeartbeatInterval time.Duration
	// MaxProducers bounds the idempotent producers remembered per
	// partition (default 10000); beyond it the longest idle is forgotten.
	MaxProducers int
	// Budget, when set, is the door's account of the broker-wide budget of
	// bytes held by requests being read and decoded: a request's frame is
	// claimed before it is read and its decoded size before it is decoded,
	// and a connection waits while the budget is spent.
	Budget *netlimit.Door
	// ACL, when set (aclEnable=true), makes connections authenticate with
	// SASL as one of its accounts and checks every request against the
	// account's permissions (sasl.go, authz.go); nil: no authentication.
	ACL Accounts
	// Traffic, when set, counts connections, requests, errors and bytes
	// (the metrics' door series); Observer, when set, is told of produced
	// and fetched records (observe.go).
	Traffic  *doorstats.Counters
	Observer Observer
	// DataDir and FS hold the door's own files (the client quotas,
	// quotas.go; the compacted topics' copies, compact.go; the
	// transactions' snapshot, txnlog.go); an empty DataDir keeps the
	// quotas and transactions in memory and refuses compacted topics.
	DataDir string
	FS      vfs.FS
	// CompactionInterval is how often compacted topics are cleaned
	// (Kafka's log.cleaner.backoff.ms; default 15 s).
	CompactionInterval time.Duration
	// MaxTransactionTimeout bounds a producer's transaction.timeout.ms
	// (Kafka's transaction.max.timeout.ms; default 15 min);
	// TxnRetryInterval is how soon a transaction completion that failed
	// is tried again (default 1 s); TxnSnapshotInterval how long after a
	// change the transactions' snapshot is written (default 1 min).
	// TransactionalIDExpiration forgets a transactional id without an
	// open transaction that has not changed for this long (Kafka's
	// transactional.id.expiration.ms; default 7 days), at the snapshot
	// writes.
	MaxTransactionTimeout     time.Duration
	TxnRetryInterval          time.Duration
	TxnSnapshotInterval       time.Duration
	TransactionalIDExpiration time.Duration
}

func (c *Config) applyDefaults() {
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = 16 << 20
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 4 << 20
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 4096
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 30 * time.Second
	}
	if c.MaxFetchBytes <= 0 {
		c.MaxFetchBytes = 55 << 20
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 10 * time.Minute
	}
	if c.AdvertisedHost == "" {
		c.AdvertisedHost = "127.0.0.1"
	}
	if c.ClusterID == "" {
		c.ClusterID = "keel"
	}
	if c.RetentionMs <= 0 {
		c.RetentionMs = 72 * 3600 * 1000
	}
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = 1 << 30
	}
	if c.RetentionCheckInterval <= 0 {
		c.RetentionCheckInterval = 5 * time.Minute
	}
	if c.ProducerIDExpiration <= 0 {
		c.ProducerIDExpiration = 24 * time.Hour
	}
	if c.MaxProducers <= 0 {
		c.MaxProducers = 10000
	}
	if c.CompactionInterval <= 0 {
		c.CompactionInterval = 15 * time.Second
	}
	if c.MaxTransactionTimeout <= 0 {
		c.MaxTransactionTimeout = 15 * time.Minute
	}
	if c.TxnRetryInterval <= 0 {
		c.TxnRetryInterval = time.Second
	}
	if c.TxnSnapshotInterval <= 0 {
		c.TxnSnapshotInterval = time.Minute
	}
	if c.TransactionalIDExpiration <= 0 {
		c.TransactionalIDExpiration = 7 * 24 * time.Hour
	}
}

// Server is the Kafka front door over a core and its store.
type Server struct {
	// retentionRounds counts the rounds of per-topic retention done
	// (retention.go), which tests wait on.
	retentionRounds atomic.Uint64

	cfg   Config
	core  *core.Broker
	st    *store.Store
	log   *slog.Logger
	parts *partitions
	// compact cleans compacted topics and serves their copies
	// (compact.go); nil without a DataDir.
	compact *compactor

	scram   *scramKeys    // SCRAM salts and derived keys (sasl.go)
	quotas  *quotaTable   // client quotas and their meters (quotas.go)
	loadErr error         // why the quotas or the compacted copies could not be read (Serve fails)
	pids    *pidAllocator // producer ids (idempotence.go)
	advPort atomic.Int32  // the advertised port (Config's, else the listener's)

	topicMu sync.Mutex // serializes the door's read-modify-writes of topic configs

	cc clusterCache // the cluster view (cluster.go), with Config.Cluster
	// unsubTopics stops the core's topic announcements to the view (Close).
	unsubTopics func()
	// clusterWake wakes a parked runClusterRefresh: a client connected.
	clusterWake chan struct{}
	// refreshParked: runClusterRefresh is parked (tests wait for it).
	refreshParked atomic.Bool

	gmu    sync.Mutex        // guards groups, cg and every group's state
	groups map[string]*group // consumer groups by name (groups.go)
	cg     cgState           // consumer groups of KIP-848 (group848.go)

	txn       *txnCoord   // the transaction coordinator (txn.go)
	txnLoaded atomic.Bool // its state is replayed (Serve)
	txnSnapMu sync.Mutex  // serializes its snapshot writes (txnlog.go)

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]*connStats // what Info reports of each (info.go)
	closed bool
	// draining: Close has begun; a connection reads no further request
	// (the one it serves is answered first, drainTimeout at most).
	draining atomic.Bool
	wg       sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc
}

// New returns a server; Serve starts it.
func New(cfg Config, c *core.Broker, logger *slog.Logger) *Server {
	cfg.applyDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, core: c, st: c.Store(), log: logger, conns: map[net.Conn]*connStats{}, ctx: ctx, cancel: cancel,
		groups: map[string]*group{}, clusterWake: make(chan struct{}, 1), txn: newTxnCoord()}
	s.scram = newScramKeys()
	s.cg.session, s.cg.heartbeat = cfg.ConsumerGroupSessionTimeout, cfg.ConsumerGroupHeartbeatInterval
	if s.quotas, s.loadErr = loadQuotas(cfg.FS, cfg.DataDir); s.loadErr != nil {
		s.quotas, _ = loadQuotas(nil, "")
	}
	if s.loadErr == nil && cfg.DataDir != "" && cfg.FS != nil {
		s.compact, s.loadErr = newCompactor(cfg.FS, path.Join(cfg.DataDir, compactDir), s.st, c, logger)
	}
	s.parts = newPartitions(s.st, producerLimits{expireMs: cfg.ProducerIDExpiration.Milliseconds(), max: cfg.MaxProducers})
	s.pids = newPIDAllocator(time.Now(), cfg.NodeID)
	if cfg.Cluster != nil {
		s.unsubTopics = c.OnTopicsChanged(s.topicsChanged) // cluster.go
	}
	s.advPort.Store(cfg.AdvertisedPort)
	return s
}

// Serve accepts connections on ln until Close; it returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	if s.loadErr != nil {
		ln.Close()
		return s.loadErr
	}
	if err := s.loadTxns(); err != nil {
		ln.Close()
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.ln = ln
	s.wg.Add(1)
	go s.expireSessions()
	if !s.cfg.Follower { // a slave's topics are its master's: it moves no log start, coordinates no transaction
		s.wg.Add(3)
		go s.runRetention()
		go s.runTxnTimeouts()
		go s.runTxnSnapshots()
	}
	if s.compact != nil {
		s.wg.Add(1)
		go s.runCompaction()
	}
	s.st.SetAgeHolds(s.ageHolds) // retention.go: topics retained longer than fileReservedTime
	if s.cfg.Cluster != nil {
		s.wg.Add(1)
		go s.runClusterRefresh()
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && s.advPort.Load() == 0 {
		s.advPort.Store(int32(a.Port))
	}
	s.mu.Unlock()
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("kafka: accept: %w", err)
			}
			// EMFILE and aborted handshakes pass: back off, keep serving.
			s.log.Warn("kafka: accept failed", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
				return nil
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		s.cfg.Traffic.Accept()
		backoff = 5 * time.Millisecond
		s.mu.Lock()
		if s.closed || len(s.conns) >= s.cfg.MaxConns {
			s.mu.Unlock()
			s.cfg.Traffic.Close()
			s.cfg.Traffic.Error()
			s.log.Warn("kafka: connection refused: too many connections", "remote", c.RemoteAddr().String(), "max", s.cfg.MaxConns)
			c.Close()
			continue
		}
		st := &connStats{since: time.Now()}
		s.conns[c] = st
		s.wg.Add(1)
		s.mu.Unlock()
		select {
		case s.clusterWake <- struct{}{}:
		default:
		}
		go s.serveConn(c, st)
	}
}

// drainTimeout bounds how long Close lets the requests in progress be
// answered before it closes their connections.
const drainTimeout = 2 * time.Second

// Close stops accepting and reading requests, answers those in progress
// (their waits end at once: a produce waiting for its confirmation on a
// master that was replaced answers NOT_LEADER_OR_FOLLOWER, so its client
// retries at the new leader rather than see a broken connection), for
// drainTimeout at most, then closes every connection and waits for their
// goroutines. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	s.draining.Store(true)
	now := time.Now()
	for c := range s.conns {
		c.SetReadDeadline(now) // an idle connection's read ends now
	}
	started := s.ln != nil
	s.mu.Unlock()
	s.cancel()
	for deadline := time.Now().Add(drainTimeout); ; {
		s.mu.Lock()
		left := len(s.conns)
		s.mu.Unlock()
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	if started {
		s.st.SetAgeHolds(nil)
		s.closeTxns()
	}
	s.compact.close()
	if s.unsubTopics != nil {
		s.unsubTopics()
	}
	return nil
}

// serveConn reads requests one at a time and answers each before reading
// the next, so responses leave in request order (as Kafka, which mutes a
// connection while it processes one of its requests).
func (s *Server) serveConn(c net.Conn, st *connStats) {
	tr := s.cfg.Traffic
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		tr.Close()
		s.wg.Done()
	}()
	log := s.log.With("remote", c.RemoteAddr().String())
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	r := bufio.NewReaderSize(c, 64<<10)
	var size [4]byte
	var out []byte
	auth := &connAuth{trusted: s.cfg.ACL == nil || s.cfg.ACL.Trusted(c.RemoteAddr())}
	for {
		c.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		if s.draining.Load() { // Close began: no further request
			return
		}
		if _, err := io.ReadFull(r, size[:]); err != nil {
			return
		}
		n := int(int32(binary.BigEndian.Uint32(size[:])))
		limit := s.cfg.MaxRequestBytes
		if !auth.authenticated() {
			limit = min(limit, maxUnauthenticatedRequestBytes)
		}
		tr.In(4)
		if n < 0 || n > limit {
			tr.Error()
			log.Warn("kafka: request frame refused, closing", "bytes", n, "max", limit, "authenticated", auth.authenticated())
			return
		}
		claim, err := s.claim(int64(n))
		if err != nil {
			return // closing
		}
		keep := s.serveFrame(c, r, n, auth, host, log, &out, &claim, tr, st)
		claim.Release()
		if !keep {
			return
		}
	}
}

// claim takes n bytes of the budget (none without one), waiting while it
// is spent; it fails only when the server closes.
func (s *Server) claim(n int64) (netlimit.Claim, error) {
	if s.cfg.Budget == nil {
		return netlimit.Claim{}, nil
	}
	return s.cfg.Budget.Acquire(s.ctx, n)
}

// serveFrame reads one request frame of n bytes, answers it and reports
// whether the connection goes on. claim holds the frame's bytes; the
// decoded size is added to it before decoding.
func (s *Server) serveFrame(c net.Conn, r io.Reader, n int, auth *connAuth, host string, log *slog.Logger, out *[]byte, claim *netlimit.Claim,
	tr *doorstats.Counters, st *connStats) bool {
	frame, err := readFrame(r, n)
	if err != nil {
		return false
	}
	tr.In(n)
	tr.Request()
	if auth.raw { // after SaslHandshake v0: a raw SASL token
		tok, err := s.saslStep(auth, frame)
		if err != nil {
			tr.Error()
			log.Warn("kafka: SASL authentication failed, closing", "mechanism", auth.mech, "err", err)
			return false
		}
		if auth.user != "" {
			auth.raw = false
			log.Info("kafka: client authenticated", "user", auth.user, "mechanism", auth.mech)
		}
		*out = binary.BigEndian.AppendUint32((*out)[:0], uint32(len(tok)))
		*out = append(*out, tok...)
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		k, err := c.Write(*out)
		tr.Out(k)
		return err == nil
	}
	req, err := decodeRequestBounded(frame, func(cost int64) error {
		if s.cfg.Budget == nil {
			return nil
		}
		return claim.Grow(s.ctx, cost)
	})
	if err != nil {
		tr.Error()
	}
	if errors.Is(err, errTooCostly) || errors.Is(err, errTooManyElements) {
		log.Warn("kafka: request refused, closing: decoding it would allocate more than its bound", "err", err)
		return false
	}
	if err != nil {
		if s.ctx.Err() == nil {
			log.Warn("kafka: malformed request, closing", "err", err)
		}
		return false
	}
	req.host = host
	st.seen(req.clientID, auth.user)
	if waitsForOthers(req.key) {
		// Its wait ends by other connections' requests (a produce, the
		// group's other members), which must be able to claim budget.
		claim.Release()
	}
	produced := producedBytes(req)
	resp, keep := s.serveRequest(auth, req, log)
	mute, after := s.throttle(auth, req, produced, resp) // quotas.go
	if resp == nil {
		if !keep {
			tr.Error()
			return false
		}
		if req.unsupported {
			tr.Error()
			log.Warn("kafka: unsupported request, closing", "api", kmsg.NameForKey(req.key), "key", req.key, "version", req.version)
			return false
		}
		return mute <= 0 || s.pause(mute) // acks=0 goes on
	}
	if !keep {
		tr.Error() // answered, then closed: a failed authentication
	}
	if mute > 0 && !after && !s.pause(mute) {
		return false
	}
	*out = appendResponse((*out)[:0], req.correlation, resp)
	c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	k, err := c.Write(*out)
	tr.Out(k)
	if err != nil || !keep {
		return false
	}
	if mute > 0 && after && !s.pause(mute) {
		return false
	}
	if cap(*out) > 1<<20 {
		*out = nil
	}
	return true
}

// waitsForOthers reports whether a request of key may wait for requests
// of other connections: Fetch (long poll, woken by a produce), JoinGroup
// and SyncGroup (woken by the group's other members). Such a request gives
// its budget back before it is handled, or requests parked in their waits
// could hold the whole budget while the requests that end their waits
// cannot be read.
func waitsForOthers(key int16) bool { return key == 1 || key == 11 || key == 14 }

// maxUnauthenticatedRequestBytes bounds a request frame before SASL
// authentication (what comes then is ApiVersions, SaslHandshake and SASL
// tokens), as Kafka's sasl.server.max.receive.size does.
const maxUnauthenticatedRequestBytes = 512 << 10

// readFrame reads a request frame of n bytes. Its buffer grows with the
// bytes that come rather than being taken whole at once: a size prefix
// costs the client four bytes.
func readFrame(r io.Reader, n int) ([]byte, error) {
	const step = 64 << 10
	b := make([]byte, 0, min(n, step))
	for len(b) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(n-len(b), len(b))) // doubling, up to n
		}
		k, err := io.ReadFull(r, b[len(b):min(n, cap(b))])
		b = b[:len(b)+k]
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// serveRequest answers req on a connection in state auth; keep false
// closes the connection (after writing resp, if any).
func (s *Server) serveRequest(auth *connAuth, req *request, log *slog.Logger) (resp kmsg.Response, keep bool) {
	req.user = auth.user
	switch b := req.body.(type) {
	case *kmsg.ApiVersionsRequest:
		return s.apiVersions(b), true
	case *kmsg.SASLHandshakeRequest:
		return s.saslHandshake(auth, b), true
	case *kmsg.SASLAuthenticateRequest:
		r, ok := s.saslAuthenticate(auth, b)
		if !ok {
			log.Warn("kafka: SASL authentication failed, closing", "mechanism", auth.mech, "err", *r.(*kmsg.SASLAuthenticateResponse).ErrorMessage)
			return r, false // answered, then closed, as Kafka does
		}
		if auth.user != "" {
			log.Info("kafka: client authenticated", "user", auth.user, "mechanism", auth.mech)
		}
		return r, true
	}
	if req.unsupported {
		if req.key == 18 {
			return s.apiVersionsUnsupported(), true
		}
		return nil, true
	}
	if s.cfg.Follower && !followerServes(req.body) {
		log.Warn("kafka: a slave's door serves consumers only, closing", "api", kmsg.NameForKey(req.key))
		return nil, false
	}
	if auth.trusted {
		return s.handle(req), true
	}
	if auth.user == "" {
		log.Warn("kafka: request before SASL authentication, closing", "api", kmsg.NameForKey(req.key))
		return nil, false
	}
	if _, ok := s.cfg.ACL.Secret(auth.user); !ok {
		log.Warn("kafka: the connection's account is gone from the ACL, closing", "user", auth.user)
		return nil, false
	}
	return s.authorized(principal{s.cfg.ACL, auth.user}, req), true
}

// handle answers one request; nil means no response (acks=0, or an
// unsupported request the connection is closed for).
func (s *Server) handle(req *request) kmsg.Response {
	if req.unsupported {
		if req.key == 18 {
			return s.apiVersionsUnsupported()
		}
		return nil
	}
	if resp := s.notCoordinated(req.body); resp != nil {
		return resp
	}
	switch b := req.body.(type) {
	case *kmsg.ApiVersionsRequest:
		return s.apiVersions(b)
	case *kmsg.MetadataRequest:
		return s.metadata(b)
	case *kmsg.ProduceRequest:
		return s.produce(b)
	case *kmsg.FetchRequest:
		return s.fetch(b)
	case *kmsg.ListOffsetsRequest:
		return s.listOffsets(b)
	case *kmsg.FindCoordinatorRequest:
		return s.findCoordinator(b)
	case *kmsg.JoinGroupRequest:
		return s.joinGroup(b, req.clientID, req.host)
	case *kmsg.SyncGroupRequest:
		return s.syncGroup(b)
	case *kmsg.HeartbeatRequest:
		return s.heartbeat(b)
	case *kmsg.LeaveGroupRequest:
		return s.leaveGroup(b)
	case *kmsg.OffsetCommitRequest:
		if b.Version >= 10 { // topics by id (group848_offsets.go)
			return s.offsetCommitByID(b, func(named *kmsg.OffsetCommitRequest) kmsg.Response { return s.offsetCommit(named, req.user) })
		}
		return s.offsetCommit(b, req.user)
	case *kmsg.OffsetFetchRequest:
		if b.Version >= 8 {
			return s.offsetFetchGroups(b, func(one *kmsg.OffsetFetchRequest) kmsg.Response {
				return s.coordinated(one, func() kmsg.Response { return s.offsetFetch(one, req.user) })
			})
		}
		return s.offsetFetch(b, req.user)
	case *kmsg.ConsumerGroupHeartbeatRequest:
		return s.consumerGroupHeartbeat(b, req.clientID, req.host)
	case *kmsg.ConsumerGroupDescribeRequest:
		return s.consumerGroupDescribe(b)
	case *kmsg.OffsetForLeaderEpochRequest:
		return s.offsetForLeaderEpoch(b)
	case *kmsg.InitProducerIDRequest:
		return s.initProducerID(b)
	case *kmsg.AddPartitionsToTxnRequest:
		return s.addPartitionsToTxn(b)
	case *kmsg.AddOffsetsToTxnRequest:
		return s.addOffsetsToTxn(b)
	case *kmsg.TxnOffsetCommitRequest:
		return s.txnOffsetCommit(b)
	case *kmsg.EndTxnRequest:
		return s.endTxn(b)
	case *kmsg.ListTransactionsRequest:
		return s.listTransactions(b)
	case *kmsg.DescribeTransactionsRequest:
		return s.describeTransactions(b, func(string) bool { return true })
	case *kmsg.DescribeProducersRequest:
		return s.describeProducers(b, func(string) bool { return true })
	case *kmsg.CreateTopicsRequest:
		return s.createTopics(b, req.user)
	case *kmsg.DeleteTopicsRequest:
		return s.deleteTopics(b)
	case *kmsg.DescribeGroupsRequest:
		return s.describeGroupsHere(b)
	case *kmsg.ListGroupsRequest:
		return s.listGroupsHere(b)
	case *kmsg.DeleteGroupsRequest:
		return s.deleteGroupsHere(b, req.user)
	case *kmsg.OffsetDeleteRequest:
		return s.offsetDelete(b, req.user)
	case *kmsg.CreatePartitionsRequest:
		return s.createPartitions(b, req.user)
	case *kmsg.DeleteRecordsRequest:
		return s.deleteRecords(b)
	case *kmsg.DescribeConfigsRequest:
		return s.describeConfigs(b)
	case *kmsg.AlterConfigsRequest:
		return s.alterConfigs(b)
	case *kmsg.IncrementalAlterConfigsRequest:
		return s.incrementalAlterConfigs(b)
	case *kmsg.DescribeClusterRequest:
		return s.describeCluster(b)
	case *kmsg.ElectLeadersRequest:
		return s.electLeaders(b)
	case *kmsg.AlterPartitionAssignmentsRequest:
		return s.alterPartitionAssignments(b)
	case *kmsg.ListPartitionReassignmentsRequest:
		return s.listPartitionReassignments(b)
	case *kmsg.DescribeACLsRequest:
		return s.describeACLs(b)
	case *kmsg.CreateACLsRequest:
		return s.createACLs(b)
	case *kmsg.DeleteACLsRequest:
		return s.deleteACLs(b)
	case *kmsg.DescribeUserSCRAMCredentialsRequest:
		return s.describeUserSCRAMCredentials(b)
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		return s.alterUserSCRAMCredentials(b)
	case *kmsg.DescribeClientQuotasRequest:
		return s.describeClientQuotas(b)
	case *kmsg.AlterClientQuotasRequest:
		return s.alterClientQuotas(b)
	}
	return nil
}
