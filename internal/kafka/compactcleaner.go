package kafka

// Cleaner cleans the compacted topics of a broker that serves no Kafka
// door: a slave of a broker group. A slave's CommitLog is its master's,
// byte for byte, and its topics (cleanup.policy among their attributes)
// come with it, so its own cleaner writes its own copies from the same
// records: the same latest record of every key, each at its offset (the
// tombstones' horizons by the slave's clock, and its passes at its own
// times). It holds the slave's CommitLog from each cleaned point as the
// door does on a master, so age retention on the slave never takes a
// record its copies do not have. On a failover the new master's door opens
// the copies the cleaner left under the same data directory.

import (
	"context"
	"log/slog"
	"path"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/store"
)

// Cleaner is the compaction of a broker without a Kafka door.
type Cleaner struct {
	x        *compactor
	st       *store.Store
	interval time.Duration
	quit     chan struct{} // closed by Close
	once     sync.Once
	running  sync.WaitGroup // Run
}

// NewCleaner opens the compacted copies under cfg.DataDir (on cfg.FS);
// cfg.CompactionInterval is how often it cleans. Run starts it.
func NewCleaner(cfg Config, c *core.Broker, log *slog.Logger) (*Cleaner, error) {
	cfg.applyDefaults()
	x, err := newCompactor(cfg.FS, path.Join(cfg.DataDir, compactDir), c.Store(), c, log)
	if err != nil {
		return nil, err
	}
	return &Cleaner{x: x, st: c.Store(), interval: cfg.CompactionInterval, quit: make(chan struct{})}, nil
}

// Run holds the store's age retention from the cleaned points and cleans
// every interval until ctx is done or Close; then it removes the holds
// and closes the copies.
func (k *Cleaner) Run(ctx context.Context) error {
	k.running.Add(1)
	defer k.running.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-k.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	k.st.SetAgeHolds(func() store.QueueHolds { return k.x.holdsInto(nil) })
	defer k.x.close()
	defer k.st.SetAgeHolds(nil)
	t := time.NewTicker(k.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			k.x.round(func() bool { return ctx.Err() != nil })
		}
	}
}

// Close stops Run and waits for it (a pass in progress ends first). It
// is idempotent.
func (k *Cleaner) Close() error {
	k.once.Do(func() { close(k.quit) })
	k.running.Wait()
	return nil
}

// Rounds is the cleaning rounds done.
func (k *Cleaner) Rounds() uint64 { return k.x.rounds.Load() }
