package broker

// Broker lifecycle, configuration and the request dispatch table.
//
// NewOnCore builds the RocketMQ front door on a core its caller owns and
// shares with the other front doors (cmd/keel builds the store and the core
// once); New builds a broker with a core of its own on an open store (tests,
// a process with this front door only): it loads the persisted topic, group
// and offset tables and starts nothing. Handler() is what the caller's
// remoting.Server serves; OnConnClose must be wired to the server's
// ServerConfig.OnConnClose (a closed connection unregisters its producers and
// consumers). Run(ctx) owns the background work: NameServer registration
// (every RegisterInterval and at once after a topic is created), the client
// expiry scan, and, with a core of its own, the core's periodic consumer
// offset flush (core.Run). Long-poll timeouts use per-request timers, not a
// scanning loop. Close is idempotent: it answers held pulls, unregisters
// from the NameServers and waits for Run's goroutines; with a core of its
// own it also closes the core and flushes offsets (else the core's owner
// does, after every front door stopped). The caller owns the store (and a
// shared core) and the remoting server and closes them after the broker.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// Config holds the broker's settings. Start from DefaultConfig: zero numeric
// limits are replaced by defaults, booleans are taken as they are. The
// core's part (topics, groups, limits, lock expiry, offset flush: see
// CoreConfig) configures the core New makes; with NewOnCore the core was
// made from it by the caller.
type Config struct {
	ClusterName string // brokerClusterName
	BrokerName  string // brokerName
	BrokerID    int64  // 0 = master
	// AdvertisedAddr is the "ip:port" clients dial; it is the store host of
	// every message (and so part of every offset message ID).
	AdvertisedAddr string
	// DataDir holds config/topics.json, config/subscriptionGroup.json and
	// config/consumerOffset.json.
	DataDir      string
	FS           vfs.FS // nil = vfs.OS{}
	NamesrvAddrs []string
	// NamesrvTLS returns the TLS client configuration to dial the
	// NameServer at addr with for registration; nil (or a nil result) dials
	// plain TCP.
	NamesrvTLS func(addr string) *tls.Config
	// Version is Keel's version, reported as keelVersion by
	// GET_BROKER_RUNTIME_INFO (brokerVersionDesc is the RocketMQ protocol
	// version Keel speaks to clients).
	Version string
	// RuntimeInfo, if set, adds entries to GET_BROKER_RUNTIME_INFO's table
	// (the process's recent send and flush latency); it must be cheap and
	// must not call into the broker.
	RuntimeInfo func() map[string]string
	// SendGate, if set, is asked before a send stores anything: a result
	// other than PutOK answers the send with that status (a slave refuses
	// sends; a SYNC_MASTER with too few in-sync replicas refuses them).
	// It must be cheap and must not block.
	SendGate func() store.PutResult
	// OnMasterAddress, if set, is told the master's address and HA
	// address from every NameServer's answer to REGISTER_BROKER that
	// names one (a slave's: RocketMQ's RegisterBrokerResponseHeader). It
	// must not block.
	OnMasterAddress func(masterAddr, haServerAddr string)
	// HAAddr is the replication address registered as haServerAddr
	// (empty: AdvertisedAddr).
	HAAddr string
	// MasterEpoch, if not 0, is registered as masterEpoch (a Keel field
	// official clients ignore): the controller's epoch of a master in
	// controller mode. A NameServer ignores a brokerId 0 registration of
	// a lower epoch than the one it holds for the group.
	MasterEpoch uint32
	// SystemRecords: a master serving slaves writes its metadata changes
	// to the CommitLog (core.Config.SystemRecords).
	SystemRecords bool
	// SlaveReadEnable and SlaveReadBehindBytes: pull responses suggest a
	// slave to a consumer reading further behind the log end than this
	// (slaveread.go); 0 = 40 % of the machine's memory.
	SlaveReadEnable      bool
	SlaveReadBehindBytes int64

	BrokerPermission            int32 // 6 = read+write
	AutoCreateTopicEnable       bool
	AutoCreateSubscriptionGroup bool
	DefaultTopicQueueNums       int32 // queues of TBW102 and of auto-created topics (4)
	MaxQueueNums                int32 // upper bound for UPDATE_AND_CREATE_TOPIC (1024)
	MaxTopics                   int   // topics this broker hosts, system topics included (100000)
	MaxGroups                   int   // subscription groups (100000)
	MaxMessageSize              int   // body bytes (4 MiB); a batch counts as a whole
	RetryMaxTimes               int32 // group default retryMaxTimes (16)
	RegionID                    string
	TraceOn                     bool

	LongPollingEnable   bool
	ShortPollingTimeout time.Duration // hold time when long polling is off (1s)
	MaxSuspendTimeout   time.Duration // cap on a pull's suspendTimeoutMillis (25s)
	MaxHeldPulls        int           // held pulls beyond this get SYSTEM_BUSY (100000)
	MaxPullMessages     int           // per pull response (1024)
	MaxPullBytes        int           // per pull response, at least one message (1 MiB)

	ChannelExpiredTimeout time.Duration // client silent this long is dropped (120s)
	ClientScanInterval    time.Duration // (10s)
	RegisterInterval      time.Duration // NameServer re-registration (30s)
	RegisterTimeout       time.Duration // per NameServer call (6s)
	OffsetFlushInterval   time.Duration // consumer offsets to disk (5s)
	LockExpiry            time.Duration // orderly queue lock lifetime (60s)
	DefaultQueryMaxNum    int           // QUERY_MESSAGE by unique key (32)
	MaxQueryNum           int           // QUERY_MESSAGE upper bound (64)
	// YoungQueueBytes decides QUERY_CONSUMER_OFFSET for a group without an
	// offset: a queue whose first message is within this many CommitLog bytes
	// of the end is "young" and the group starts at 0 (RocketMQ's in-memory
	// check). Default 1 GiB.
	YoungQueueBytes int64

	Now func() time.Time // nil = time.Now
}

// DefaultConfig returns RocketMQ's defaults (with 4 queues per topic).
func DefaultConfig() Config {
	return Config{
		ClusterName: "DefaultCluster", BrokerName: "broker-a", AdvertisedAddr: "127.0.0.1:10911",
		BrokerPermission: core.PermRW, AutoCreateTopicEnable: true, AutoCreateSubscriptionGroup: true,
		DefaultTopicQueueNums: 4, RegionID: "DefaultRegion", TraceOn: true, LongPollingEnable: true,
	}
}

func (c *Config) applyDefaults() {
	setDef(&c.ClusterName, "DefaultCluster")
	setDef(&c.BrokerName, "broker-a")
	setDef(&c.RegionID, "DefaultRegion")
	setDef(&c.BrokerPermission, core.PermRW)
	setDef(&c.DefaultTopicQueueNums, 4)
	setDef(&c.MaxQueueNums, 1024)
	setDef(&c.MaxTopics, 100000)
	setDef(&c.MaxGroups, 100000)
	setDef(&c.MaxMessageSize, 4<<20)
	setDef(&c.RetryMaxTimes, 16)
	setDef(&c.ShortPollingTimeout, time.Second)
	setDef(&c.MaxSuspendTimeout, 25*time.Second)
	setDef(&c.MaxHeldPulls, 100000)
	if c.SlaveReadEnable && c.SlaveReadBehindBytes == 0 {
		c.SlaveReadBehindBytes = defaultSlaveReadBehind() // slaveread.go
	}
	setDef(&c.MaxPullMessages, 1024)
	setDef(&c.MaxPullBytes, 1<<20)
	setDef(&c.ChannelExpiredTimeout, 120*time.Second)
	setDef(&c.ClientScanInterval, 10*time.Second)
	setDef(&c.RegisterInterval, 30*time.Second)
	setDef(&c.RegisterTimeout, 6*time.Second)
	setDef(&c.OffsetFlushInterval, 5*time.Second)
	setDef(&c.LockExpiry, 60*time.Second)
	setDef(&c.DefaultQueryMaxNum, 32)
	setDef(&c.MaxQueryNum, 64)
	setDef(&c.YoungQueueBytes, 1<<30)
	if c.FS == nil {
		c.FS = vfs.OS{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func setDef[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Validate checks the configuration (after defaults are applied).
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("broker: DataDir is required")
	}
	if _, err := netip.ParseAddrPort(c.AdvertisedAddr); err != nil {
		return fmt.Errorf("broker: AdvertisedAddr %q must be ip:port: %w", c.AdvertisedAddr, err)
	}
	if c.DefaultTopicQueueNums < 1 || c.DefaultTopicQueueNums > c.MaxQueueNums {
		return fmt.Errorf("broker: DefaultTopicQueueNums %d out of [1,%d]", c.DefaultTopicQueueNums, c.MaxQueueNums)
	}
	if c.BrokerPermission&^(core.PermRW|core.PermInherit) != 0 {
		return fmt.Errorf("broker: BrokerPermission %d invalid", c.BrokerPermission)
	}
	if c.MaxMessageSize < 1 {
		return fmt.Errorf("broker: MaxMessageSize %d invalid", c.MaxMessageSize)
	}
	return nil
}

// handlerFunc serves one request code. A nil response with a nil error means
// "no response now" (a held pull answers later through the connection).
type handlerFunc func(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error)

// Broker is a RocketMQ broker on one store. Its methods are safe for
// concurrent use.
type Broker struct {
	cfg       Config
	st        *store.Store
	log       *slog.Logger
	storeHost netip.AddrPort
	handlers  map[int16]handlerFunc

	core    *core.Broker // topics, groups, offsets, clients, locks: everything but the protocol
	ownCore bool         // New made core: Run flushes its offsets, Close closes it
	pulls   *pullHold
	reg     *registrar

	observer atomic.Pointer[observerBox]  // observe.go
	amqpInfo atomic.Pointer[AMQPInfoFunc] // admin_amqp.go
	// amqpMissing names the AMQP cluster's groups seen and gone (admin_amqp.go).
	amqpMissing atomic.Pointer[func() []string]
	kafka       atomic.Pointer[KafkaHooks] // admin_kafka.go

	closeOnce sync.Once
	closed    chan struct{} // closed by Close
	runMu     sync.Mutex    // orders Run's wg.Add before Close's wg.Wait
	stopping  bool          // guarded by runMu
	wg        sync.WaitGroup
}

// New creates a broker with a core of its own on st (core.New with
// CoreConfig(cfg)). It loads the persisted metadata and starts nothing;
// logger nil discards logs.
func New(cfg Config, st *store.Store, logger *slog.Logger) (*Broker, error) {
	if st == nil {
		return nil, errors.New("broker: store is required")
	}
	cc, err := CoreConfig(cfg)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c, err := core.New(cc, st, logger)
	if err != nil {
		return nil, err
	}
	b, err := NewOnCore(cfg, c, logger)
	if err != nil {
		return nil, err
	}
	b.ownCore = true
	return b, nil
}

// NewOnCore creates the RocketMQ front door on c, a core its caller owns
// (runs, closes and flushes) and may share with other front doors; c is
// expected to have been made with CoreConfig(cfg). It starts nothing;
// logger nil discards logs.
func NewOnCore(cfg Config, c *core.Broker, logger *slog.Logger) (*Broker, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("broker: core is required")
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	b := &Broker{
		cfg: cfg, st: c.Store(), log: logger, storeHost: storeHost(cfg.AdvertisedAddr), core: c,
		closed: make(chan struct{}),
	}
	b.pulls = newPullHold(b)
	b.reg = newRegistrar(b)
	c.OnTopicsChanged(b.reg.kick)
	b.handlers = b.dispatchTable()
	return b, nil
}

// storeHost is the advertised address as stamped on messages (validated
// ip:port, IPv4-mapped addresses unmapped).
func storeHost(advertised string) netip.AddrPort {
	host := netip.MustParseAddrPort(advertised)
	return netip.AddrPortFrom(host.Addr().Unmap(), host.Port())
}

// dispatchTable maps every request code the broker serves to its handler.
func (b *Broker) dispatchTable() map[int16]handlerFunc {
	return map[int16]handlerFunc{
		remoting.ReqSendMessage:                   b.handleSend,
		remoting.ReqSendMessageV2:                 b.handleSend,
		remoting.ReqSendBatchMessage:              b.handleSend,
		remoting.ReqPullMessage:                   b.handlePull,
		remoting.ReqHeartBeat:                     b.handleHeartbeat,
		remoting.ReqUnregisterClient:              b.handleUnregisterClient,
		remoting.ReqGetConsumerListByGroup:        b.handleGetConsumerList,
		remoting.ReqCheckClientConfig:             b.handleCheckClientConfig,
		remoting.ReqQueryConsumerOffset:           b.handleQueryConsumerOffset,
		remoting.ReqUpdateConsumerOffset:          b.handleUpdateConsumerOffset,
		remoting.ReqGetMaxOffset:                  b.handleGetMaxOffset,
		remoting.ReqGetMinOffset:                  b.handleGetMinOffset,
		remoting.ReqSearchOffsetByTimestamp:       b.handleSearchOffset,
		remoting.ReqGetEarliestMsgStoretime:       b.handleEarliestStoreTime,
		remoting.ReqLockBatchMQ:                   b.handleLockBatch,
		remoting.ReqUnlockBatchMQ:                 b.handleUnlockBatch,
		remoting.ReqQueryMessage:                  b.handleQueryMessage,
		remoting.ReqViewMessageByID:               b.handleViewMessage,
		remoting.ReqConsumerSendMsgBack:           b.handleSendBack,
		remoting.ReqEndTransaction:                b.handleEndTransaction,
		remoting.ReqListTransactions:              b.handleListTransactions,
		remoting.ReqListIsolatedRecords:           b.handleListIsolated,      // admin_isolated.go
		remoting.ReqListAMQP:                      b.handleListAMQP,          // admin_amqp.go
		remoting.ReqListKafka:                     b.handleListKafka,         // admin_kafka.go
		remoting.ReqKafkaGroupOffsets:             b.handleKafkaGroupOffsets, // kafka_offsets.go
		remoting.ReqKafkaTopic:                    b.handleKafkaTopic,        // kafka_topics.go
		remoting.ReqUpdateAndCreateTopic:          b.handleCreateTopic,
		remoting.ReqDeleteTopicInBroker:           b.handleDeleteTopic,
		remoting.ReqGetAllSubscriptionGroupConfig: b.handleGetAllGroups,
		remoting.ReqGetBrokerRuntimeInfo:          b.handleRuntimeInfo,
		remoting.ReqGetAllTopicConfig:             b.handleGetAllTopicConfig,
		remoting.ReqGetTopicStatsInfo:             b.handleTopicStats,
		remoting.ReqUpdateAndCreateSubscription:   b.handleUpdateGroup,
		remoting.ReqDeleteSubscriptionGroup:       b.handleDeleteGroup,
		remoting.ReqGetConsumeStats:               b.handleGetConsumeStats,        // admin_keel.go
		remoting.ReqGetConsumerConnectionList:     b.handleGetConsumerConnections, // admin_keel.go
	}
}

// Handler returns the remoting handler serving the broker's request codes.
// It is a remoting.BodyBorrower: the send codes do not keep their request's
// body (send.go), so their frame buffers are reused.
func (b *Broker) Handler() remoting.Handler { return brokerHandler{b} }

func (b *Broker) handle(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	h := b.handlers[req.Code]
	if h == nil {
		return b.reply(req, req.NewResponse(remoting.ResRequestCodeNotSupported,
			fmt.Sprintf("request type %d not supported", req.Code)))
	}
	resp, err := b.call(ctx, h, c, req)
	if err != nil {
		resp = b.errorResponse(req, err)
	}
	return b.reply(req, resp)
}

// call runs a handler and turns a panic (a bug) into SYSTEM_ERROR for this
// request instead of taking the broker down.
func (b *Broker) call(ctx context.Context, h handlerFunc, c *remoting.Conn, req *remoting.Command) (resp *remoting.Command, err error) {
	defer func() {
		if r := recover(); r != nil {
			b.log.Error("handler panic", "code", req.Code, "panic", r, "stack", string(debug.Stack()))
			req.KeepBody() // whatever the handler left behind may still refer to it
			resp, err = nil, fmt.Errorf("broker: internal error handling request %d", req.Code)
		}
	}()
	return h(ctx, c, req)
}

// reply drops responses to requests flagged oneway (Java clients set the
// flag; the Go client never does, so it gets a reply to everything).
func (b *Broker) reply(req, resp *remoting.Command) *remoting.Command {
	if req.IsOneway() {
		if resp != nil && resp.OnWritten != nil {
			resp.OnWritten() // release lent buffers of a response never sent
		}
		return nil
	}
	return resp
}

func (b *Broker) errorResponse(req *remoting.Command, err error) *remoting.Command {
	if code, remark, ok := errorCode(err); ok {
		return req.NewResponse(code, remark)
	}
	b.log.Error("request failed", "code", req.Code, "err", err)
	return req.NewResponse(remoting.ResSystemError, err.Error())
}

// OnConnClose unregisters every producer and consumer of a closed
// connection (the Go client never sends UNREGISTER_CLIENT) and notifies the
// consumer groups that lost a member.
func (b *Broker) OnConnClose(c *remoting.Conn) { b.removeConn(c) }

// Run performs the background work until ctx is done or Close is called.
func (b *Broker) Run(ctx context.Context) error {
	b.runMu.Lock()
	if b.stopping {
		b.runMu.Unlock()
		return nil
	}
	b.wg.Add(1)
	b.runMu.Unlock()
	defer b.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-b.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	var inner sync.WaitGroup
	inner.Add(2)
	go func() { defer inner.Done(); b.reg.run(ctx) }()
	go func() { defer inner.Done(); b.every(ctx, b.cfg.ClientScanInterval, b.scanClients) }()
	if b.ownCore {
		inner.Add(1)
		go func() { defer inner.Done(); b.core.Run(ctx) }()
	}
	inner.Wait()
	return nil
}

func (b *Broker) every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

func (b *Broker) scanClients() { b.expireClients() }

// Close stops the background work, answers held pulls and unregisters from
// the NameServers; with a core of its own it closes the core and flushes
// consumer offsets. It is idempotent and returns the offset flush error,
// if any.
func (b *Broker) Close() error {
	var err error
	b.closeOnce.Do(func() {
		b.runMu.Lock()
		b.stopping = true
		close(b.closed)
		b.runMu.Unlock()
		b.wg.Wait()
		if b.ownCore {
			b.core.Close() // answers held pulls
			err = b.core.FlushOffsets()
		} else {
			b.core.WakeOwned(b) // answers this front door's held pulls
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.RegisterTimeout)
		b.reg.unregisterAll(ctx)
		cancel()
		b.reg.close()
	})
	return err
}

// peerAddr is the client address of a connection as a netip.AddrPort
// (IPv4-mapped addresses unmapped).
func peerAddr(c *remoting.Conn) netip.AddrPort {
	if c == nil {
		return netip.AddrPort{}
	}
	a := c.RemoteAddr()
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if a == nil {
		return netip.AddrPort{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
