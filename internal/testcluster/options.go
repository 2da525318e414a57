package testcluster

import (
	"log/slog"
	"net"
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/broker/transaction"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// MemDir is the data directory of a cluster on a MemFS.
const MemDir = "/keel"

// Option configures Start.
type Option func(*options)

type options struct {
	dir        string     // "" = tb.TempDir(), or MemDir with mem
	mem        *vfs.MemFS // nil = the real filesystem
	storeMut   []func(*store.Config)
	brokerMut  []func(*broker.Config)
	scheduler  bool
	levels     []time.Duration
	txn        bool
	txnMut     func(*transaction.Config)
	dedup      time.Duration
	handler    func(remoting.Handler) remoting.Handler
	brokerLn   func(net.Listener) net.Listener
	namesrvLn  func(net.Listener) net.Listener
	advertise  func(listenAddr string) string
	remotingLg *slog.Logger
}

// WithDir puts the data in dir on the real filesystem (default: a fresh
// tb.TempDir()).
func WithDir(dir string) Option { return func(o *options) { o.dir = dir } }

// WithMemFS puts the data in MemDir on a fresh vfs.MemFS (crash-simulating;
// required by Kill).
func WithMemFS() Option { return func(o *options) { o.mem = vfs.NewMem() } }

// WithFlush sets the store's flushDiskType (default AsyncFlush).
func WithFlush(t store.FlushDiskType) Option {
	return WithStoreConfig(func(c *store.Config) { c.FlushDiskType = t })
}

// WithStoreConfig changes the store configuration after the harness
// defaults (small segments and index) are applied. Repeatable.
func WithStoreConfig(mut func(*store.Config)) Option {
	return func(o *options) { o.storeMut = append(o.storeMut, mut) }
}

// WithBrokerConfig changes the broker configuration after DataDir, FS,
// AdvertisedAddr and NamesrvAddrs are set. Repeatable.
func WithBrokerConfig(mut func(*broker.Config)) Option {
	return func(o *options) { o.brokerMut = append(o.brokerMut, mut) }
}

// WithScheduler runs scheduled delivery (delay levels, timers, retry
// back-off) with the given delay levels (nil = the schedule defaults); the
// store's tag codes of schedule entries become their action times, as in
// keel serve.
func WithScheduler(levels []time.Duration) Option {
	return func(o *options) { o.scheduler, o.levels = true, levels }
}

// WithTransactions runs the transaction engine; mut (may be nil) sets its
// check interval, timeout, check limit and so on after the harness filled
// in Store, Producers, StoreHost, Dir and FS.
func WithTransactions(mut func(*transaction.Config)) Option {
	return func(o *options) { o.txn, o.txnMut = true, mut }
}

// WithDedup installs producer de-duplication with the given window
// (duplicationWindowSeconds).
func WithDedup(window time.Duration) Option { return func(o *options) { o.dedup = window } }

// WithHandler wraps the broker's request handler (e.g. access control).
func WithHandler(wrap func(remoting.Handler) remoting.Handler) Option {
	return func(o *options) { o.handler = wrap }
}

// WithBrokerListener wraps the broker's listener (e.g. TLS). It is called
// at every broker start.
func WithBrokerListener(wrap func(net.Listener) net.Listener) Option {
	return func(o *options) { o.brokerLn = wrap }
}

// WithNamesrvListener wraps the NameServer's listener (e.g. TLS).
func WithNamesrvListener(wrap func(net.Listener) net.Listener) Option {
	return func(o *options) { o.namesrvLn = wrap }
}

// WithAdvertise makes the broker advertise advertise(listenAddr) instead of
// its listener's address (e.g. a proxy in front of it). It is called at
// every broker start.
func WithAdvertise(advertise func(listenAddr string) string) Option {
	return func(o *options) { o.advertise = advertise }
}

// WithRemotingLogger sets the logger of the broker's remoting server (the
// broker and its engines log nowhere).
func WithRemotingLogger(l *slog.Logger) Option { return func(o *options) { o.remotingLg = l } }
