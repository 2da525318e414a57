package core

// Broker lifecycle and configuration. New loads the persisted topic, group
// and offset tables, subscribes to the store's OnVisible events, installs
// the store's consumer-offsets hook (consumed.go) and starts nothing. Its
// owner (cmd/keel, which hands the one core to every front door) runs Run,
// which flushes committed offsets every OffsetFlushInterval, and at the
// end calls Close, then FlushOffsets, after the front doors stopped.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// Config holds the core's settings. Zero numeric limits are replaced by
// defaults; booleans are taken as they are.
type Config struct {
	ClusterName string // the CLUSTER property of stored messages
	BrokerName  string // in error messages
	// StoreHost is the store host of every message (part of every offset
	// message ID) and the address in broker-made unique IDs.
	StoreHost        netip.AddrPort
	BrokerPermission int32 // PermRead|PermWrite (PermRW)
	MaxMessageSize   int   // body bytes (4 MiB); a batch counts as a whole

	// DataDir holds config/topics.json, config/subscriptionGroup.json and
	// config/consumerOffset.json.
	DataDir string
	FS      vfs.FS // nil = vfs.OS{}

	AutoCreateTopicEnable       bool
	AutoCreateSubscriptionGroup bool
	DefaultTopicQueueNums       int32 // queues of TBW102 and of auto-created topics (4)
	MaxQueueNums                int32 // upper bound of a topic's queue counts (1024)
	MaxTopics                   int   // topics this broker hosts, system topics included (100000)
	MaxGroups                   int   // subscription groups (100000)
	RetryMaxTimes               int32 // group default retryMaxTimes (16)
	// YoungQueueBytes decides the offset of a group without one: a queue
	// whose first message is within this many CommitLog bytes of the end is
	// "young" and the group starts at 0. Default 1 GiB.
	YoungQueueBytes int64

	// MaxWaits bounds the waits held at once (Hold, WaitForData; the
	// RocketMQ adapter's held pulls): 100000.
	MaxWaits int

	// LockExpiry is how long a queue lock lasts without renewal (60s).
	LockExpiry time.Duration
	// OffsetFlushInterval is how often Run writes committed offsets (5s).
	OffsetFlushInterval time.Duration

	// SystemRecords makes a master write every change of its topics,
	// groups and committed offsets to its CommitLog as system records, so
	// that they reach its slaves (syslog.go). A replica's core applies the
	// records it receives whatever this says.
	SystemRecords bool
	// Tables keep the system record kinds the core does not own
	// (tables.go); a kind none owns stops the store.
	Tables []SystemTable

	Now func() time.Time // nil = time.Now
}

func (c *Config) applyDefaults() {
	setDef(&c.BrokerPermission, PermRW)
	setDef(&c.MaxMessageSize, 4<<20)
	setDef(&c.DefaultTopicQueueNums, 4)
	setDef(&c.MaxQueueNums, 1024)
	setDef(&c.MaxTopics, 100000)
	setDef(&c.MaxGroups, 100000)
	setDef(&c.RetryMaxTimes, 16)
	setDef(&c.YoungQueueBytes, 1<<30)
	setDef(&c.MaxWaits, 100000)
	setDef(&c.LockExpiry, 60*time.Second)
	setDef(&c.OffsetFlushInterval, 5*time.Second)
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

// Broker is the protocol-free broker on one store: its methods are safe
// for concurrent use.
type Broker struct {
	cfg  Config
	st   *store.Store
	log  *slog.Logger
	uniq *message.UniqIDGenerator

	topics  *configTable[TopicConfig]
	groups  *configTable[GroupConfig]
	offsets *offsetTable
	unsaved unsavedGroups // groups not yet written for lack of space (diskfull.go)
	waits   *waits        // longpoll.go
	sys     sysState      // apply.go

	consumers *Consumers  // online consumers and their subscriptions (consumers.go)
	producers *Producers  // online producers (producers.go)
	locks     *QueueLocks // orderly consumers' queue locks (locks.go)

	topicsChangedMu sync.Mutex
	topicsChanged   atomic.Pointer[[]*func()] // OnTopicsChanged subscribers

	scheduler    atomic.Pointer[schedulerBox] // hooks.go
	transactions atomic.Pointer[transactionsBox]
	dedup        atomic.Pointer[dedupBox]
}

// New creates the core on st and loads the persisted metadata; logger nil
// discards logs.
func New(cfg Config, st *store.Store, logger *slog.Logger) (*Broker, error) {
	cfg.applyDefaults()
	if cfg.DataDir == "" {
		return nil, errors.New("core: DataDir is required")
	}
	if cfg.DefaultTopicQueueNums < 1 || cfg.DefaultTopicQueueNums > cfg.MaxQueueNums {
		return nil, fmt.Errorf("core: DefaultTopicQueueNums %d out of [1,%d]", cfg.DefaultTopicQueueNums, cfg.MaxQueueNums)
	}
	if st == nil {
		return nil, errors.New("core: store is required")
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	now := func() int64 { return cfg.Now().UnixMilli() }
	confDir := filepath.Join(cfg.DataDir, "config")
	b := &Broker{
		cfg: cfg, st: st, log: logger, uniq: message.NewUniqIDGenerator(cfg.StoreHost.Addr()),
		topics:  newConfigTable[TopicConfig](cfg.FS, filepath.Join(confDir, "topics.json"), "topicConfigTable", now).withLimit("topic", cfg.MaxTopics),
		groups:  newConfigTable[GroupConfig](cfg.FS, filepath.Join(confDir, "subscriptionGroup.json"), "subscriptionGroupTable", now).withLimit("subscription group", cfg.MaxGroups),
		offsets: newOffsetTable(cfg.FS, filepath.Join(confDir, "consumerOffset.json")),
	}
	b.offsets.rates = newConsumeRates(cfg.Now)
	b.offsets.now = cfg.Now
	b.waits = newWaits(b)
	b.consumers = newConsumers(cfg.Now, logger)
	b.producers = newProducers(cfg.Now)
	b.locks = newQueueLocks(cfg.LockExpiry, cfg.Now)
	if err := b.loadMetadata(); err != nil { // apply.go: files, then the log since their snapshot points
		return nil, err
	}
	if err := b.initTopics(); err != nil {
		return nil, err
	}
	st.OnVisible(b.onDispatch)
	st.SetConsumerOffsets(b.consumerOffsets) // consumed.go
	return b, nil
}

// onDispatch is the core's OnVisible subscriber: it wakes the waits the new
// entry satisfies and passes the event on to the Scheduler when it
// observes dispatch. It runs on the dispatcher goroutine and must not
// block.
func (b *Broker) onDispatch(topic string, queueID int32, queueOffset int64, tagsCode int64) {
	b.waits.onDispatch(topic, queueID, queueOffset, tagsCode)
	if box := b.scheduler.Load(); box != nil && box.obs != nil {
		box.obs.OnDispatch(topic, queueID, queueOffset, tagsCode)
	}
}

// Run flushes committed offsets every OffsetFlushInterval (and writes
// the groups a full disk held back) until ctx is done.
func (b *Broker) Run(ctx context.Context) error {
	t := time.NewTicker(b.cfg.OffsetFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			b.flushOffsets()
		}
	}
}

func (b *Broker) flushOffsets() {
	if err := b.FlushOffsets(); err != nil {
		b.log.Error("consumer offset flush failed", "err", err)
	}
	b.SaveUnsavedGroups()
}

// Close wakes every held wait and refuses new ones; it is idempotent.
// Committed offsets are flushed by FlushOffsets, which the owner calls
// after Close. The caller owns the store and closes it after the core.
func (b *Broker) Close() { b.waits.closeAll() }

// OnTopicsChanged adds fn to what is called after a topic was created,
// changed or deleted (the RocketMQ adapter re-registers with the
// NameServers; a Kafka door's compactor forgets deleted topics' copies),
// until the returned cancel is called (a door that closes). fn must not
// block.
func (b *Broker) OnTopicsChanged(fn func()) (cancel func()) {
	sub := &fn
	b.setTopicsChanged(func(fns []*func()) []*func() { return append(fns, sub) })
	return func() {
		b.setTopicsChanged(func(fns []*func()) []*func() {
			return slices.DeleteFunc(fns, func(f *func()) bool { return f == sub })
		})
	}
}

// setTopicsChanged replaces the subscribers by edit of a copy of them.
func (b *Broker) setTopicsChanged(edit func([]*func()) []*func()) {
	b.topicsChangedMu.Lock()
	defer b.topicsChangedMu.Unlock()
	var fns []*func()
	if p := b.topicsChanged.Load(); p != nil {
		fns = append(fns, *p...)
	}
	fns = edit(fns)
	b.topicsChanged.Store(&fns)
}

// Store returns the broker's message store.
func (b *Broker) Store() *store.Store { return b.st }

// announce tells the front doors that the topic table changed.
func (b *Broker) announce() {
	if p := b.topicsChanged.Load(); p != nil {
		for _, fn := range *p {
			(*fn)()
		}
	}
}

func itoa[T ~int | ~int32 | ~int64](v T) string { return strconv.FormatInt(int64(v), 10) }
