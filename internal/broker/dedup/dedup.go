package dedup

import (
	"context"
	"errors"
	"hash/maphash"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// Defaults.
const (
	DefaultWindow     = 120 * time.Second
	DefaultMaxEntries = 1 << 18
	// indexQueryMax bounds the records one index lookup inspects per topic.
	indexQueryMax = 32
)

// DefaultShadowTopics hold records stored on behalf of another topic (named
// in their REAL_TOPIC property): half messages and scheduled messages. A
// send to topic T may have been stored there.
var DefaultShadowTopics = []string{"RMQ_SYS_TRANS_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX", "KEEL_SYS_TIMER"}

// Index is what the de-duplicator needs of the store (*store.Store).
type Index interface {
	QueryByKey(topic, key string, max int, beginMs, endMs int64) ([]int64, error)
	LookMessageByOffset(physOffset int64) ([]byte, error)
}

// Config configures a Deduplicator.
type Config struct {
	// Window is duplicationWindowSeconds: a send whose UNIQ_KEY was stored
	// for the same topic at most this long ago is a duplicate. 0 turns
	// de-duplication off.
	Window time.Duration
	// MaxEntries bounds the in-memory table (about 150 bytes each).
	MaxEntries int
	// Index finds originals the table does not hold (after a restart, or
	// evicted at MaxEntries). Required when Window > 0.
	Index Index
	// StartsEmpty says that the store held no record when the
	// de-duplicator was made and is filled only by this process's puts (a
	// master, not a replica): nothing stored predates the table, so it is
	// complete from the start and a miss never needs the index.
	StartsEmpty  bool
	ShadowTopics []string         // nil = DefaultShadowTopics
	Now          func() time.Time // nil = time.Now; the store's clock
	Logger       *slog.Logger
}

// entry is one stored message as its send was answered, or, while
// pending, the marker of a send of its key being stored (in the table, not
// yet in the ring).
type entry struct {
	key         string
	hash        uint64 // maphash of key with Deduplicator.seed
	queueID     int32
	queueOffset int64
	phys        int64
	storeTs     int64 // ms
	// Guarded by Deduplicator.mu. wake is made by the first send that
	// waits for a pending entry and closed when the entry is settled.
	pending, released bool
	wake              chan struct{}
}

// Stats are the de-duplicator's counters.
type Stats struct {
	Duplicates   int64 // sends answered with an earlier result
	IndexLookups int64 // misses checked against the key index
	IndexHits    int64 // duplicates found through the index
	Evictions    int64 // entries dropped at MaxEntries before their window ended
	Waits        int64 // sends that waited for an in-flight send of the same key
	Entries      int   // current table size
}

// Deduplicator implements the broker's Deduplicator hook. See the package
// documentation.
type Deduplicator struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// table holds the stored entries and pending markers by the hash of
	// their key (slots.go): a look-up hashes the key once and compares 8
	// bytes per slot, and the table's growth moves no string keys.
	table   slotTable
	seed    maphash.Seed
	ring    []*entry // stored entries in insertion order, circular, len == MaxEntries
	head, n int
	// complete: every message this process stored at or after this store
	// time (ms) is in the table unless its window has passed or it was
	// evicted; evicted (nil until the first eviction) knows those.
	complete int64
	evicted  *evictedKeys

	dups, lookups, indexHits, evictions, waits atomic.Int64
}

// New returns a de-duplicator. With Window 0 every Check passes through.
func New(cfg Config) (*Deduplicator, error) {
	if cfg.Window < 0 {
		return nil, errors.New("dedup: negative Window")
	}
	if cfg.Window > 0 && cfg.Index == nil {
		return nil, errors.New("dedup: Index is required")
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.ShadowTopics == nil {
		cfg.ShadowTopics = DefaultShadowTopics
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	complete := cfg.Now().UnixMilli()
	if cfg.StartsEmpty {
		complete = math.MinInt64
	}
	var table slotTable
	if cfg.Window > 0 {
		table = newSlotTable(cfg.MaxEntries)
	}
	return &Deduplicator{
		cfg: cfg, log: cfg.Logger, table: table, seed: maphash.MakeSeed(),
		ring: make([]*entry, cfg.MaxEntries), complete: complete,
	}, nil
}

// Stats returns a snapshot of the counters.
func (d *Deduplicator) Stats() Stats {
	d.mu.Lock()
	n := d.table.n
	d.mu.Unlock()
	return Stats{Duplicates: d.dups.Load(), IndexLookups: d.lookups.Load(), IndexHits: d.indexHits.Load(),
		Evictions: d.evictions.Load(), Waits: d.waits.Load(), Entries: n}
}

func noRelease(*message.Message, store.PutResult) {}

// Check implements broker.Deduplicator: orig != nil is the earlier result
// of the same (topic, uniqKey) within the window; otherwise the caller
// stores the message and calls release once. Concurrent Checks of one key
// wait for the first one's release.
func (d *Deduplicator) Check(ctx context.Context, topic, uniqKey string) (*message.Message, func(*message.Message, store.PutResult), error) {
	if d.cfg.Window <= 0 || uniqKey == "" {
		return nil, noRelease, nil
	}
	key := topic + "#" + uniqKey
	hash := maphash.String(d.seed, key)
	for {
		d.mu.Lock()
		now := d.cfg.Now().UnixMilli()
		from := now - d.cfg.Window.Milliseconds()
		d.expireLocked(from)
		e := d.lookupLocked(key, hash)
		if e != nil && e.pending {
			if e.wake == nil {
				e.wake = make(chan struct{})
			}
			ch := e.wake
			d.mu.Unlock()
			d.waits.Add(1)
			core.BeforeWait(ctx) // the send waited for may be the caller's own, not yet stored
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		if e != nil && e.storeTs >= from {
			d.mu.Unlock()
			d.dups.Add(1)
			return e.message(), noRelease, nil
		}
		p := &entry{key: key, hash: hash, pending: true}
		d.setLocked(p, e) // an expired entry e of the key leaves the table here, the ring at its turn
		needIndex := from < d.complete || (d.evicted != nil && d.evicted.mayHold(hash, from))
		d.mu.Unlock()
		if needIndex {
			e, err := d.lookup(topic, uniqKey, from, now)
			if err != nil || e != nil {
				d.settle(p, e)
				if err != nil {
					return nil, nil, err
				}
				d.dups.Add(1)
				d.indexHits.Add(1)
				return e, noRelease, nil
			}
		}
		return nil, func(stored *message.Message, res store.PutResult) {
			if stored != nil && (res.Status == store.PutOK || res.Status == store.PutFlushDiskTimeout) {
				d.settle(p, stored)
				return
			}
			d.settle(p, nil)
		}, nil
	}
}

// settle ends the pending marker p: with stored non-nil it becomes the
// key's entry, else it leaves the table. Sends waiting for it look again.
// Only the first call for p counts.
func (d *Deduplicator) settle(p *entry, stored *message.Message) {
	d.mu.Lock()
	if p.released {
		d.mu.Unlock()
		return
	}
	p.released, p.pending = true, false
	if stored != nil {
		p.queueID, p.queueOffset, p.phys, p.storeTs = stored.QueueID, stored.QueueOffset, stored.PhysOffset, stored.StoreTimestamp
		d.insertLocked(p) // a pending entry stays its key's until settled: nothing replaces or evicts it
	} else {
		d.removeLocked(p)
	}
	wake := p.wake
	p.wake = nil
	d.mu.Unlock()
	if wake != nil {
		close(wake)
	}
}

func (e *entry) message() *message.Message {
	return &message.Message{QueueID: e.queueID, QueueOffset: e.queueOffset, PhysOffset: e.phys, StoreTimestamp: e.storeTs}
}

// insertLocked adds e, already the table's entry of its key, to the ring.
func (d *Deduplicator) insertLocked(e *entry) {
	if d.n == len(d.ring) {
		old := d.ring[d.head]
		d.dropHeadLocked()
		d.evictions.Add(1)
		if d.evicted == nil {
			d.evicted = newEvictedKeys(len(d.ring))
		}
		d.evicted.add(old.hash, old.storeTs)
	}
	d.ring[(d.head+d.n)%len(d.ring)] = e
	d.n++
}

func (d *Deduplicator) dropHeadLocked() {
	old := d.ring[d.head]
	d.ring[d.head] = nil
	d.head = (d.head + 1) % len(d.ring)
	d.n--
	d.removeLocked(old) // unless a later entry of its key took its place
}

// lookupLocked returns the table's entry of key (hash its hash), or nil.
func (d *Deduplicator) lookupLocked(key string, hash uint64) *entry {
	return d.table.find(key, hash)
}

// setLocked makes p its key's entry in place of old, the key's entry
// found by lookupLocked (nil: none).
func (d *Deduplicator) setLocked(p, old *entry) {
	if old != nil {
		d.removeLocked(old)
	}
	d.table.add(p)
}

// removeLocked takes e out of the table if it is there.
func (d *Deduplicator) removeLocked(e *entry) {
	d.table.remove(e)
}

// expireLocked drops entries from the head whose window has passed.
func (d *Deduplicator) expireLocked(from int64) {
	for d.n > 0 && d.ring[d.head].storeTs < from {
		d.dropHeadLocked()
	}
}

// lookup searches the key index for the oldest record of (topic, uniq)
// stored since from: on topic itself, or on a shadow topic with
// REAL_TOPIC = topic (reported with its REAL_QID). A hit is recorded.
func (d *Deduplicator) lookup(topic, uniq string, from, now int64) (*message.Message, error) {
	d.lookups.Add(1)
	var best *message.Message
	for _, t := range append([]string{topic}, d.cfg.ShadowTopics...) {
		offs, err := d.cfg.Index.QueryByKey(t, uniq, indexQueryMax, max(from, 0), now)
		if err != nil {
			return nil, err
		}
		for _, off := range offs {
			e := d.candidate(t, topic, uniq, off, from)
			if e != nil && (best == nil || e.StoreTimestamp < best.StoreTimestamp) {
				best = e
			}
		}
	}
	return best, nil
}

func (d *Deduplicator) candidate(recTopic, topic, uniq string, off, from int64) *message.Message {
	rec, err := d.cfg.Index.LookMessageByOffset(off)
	if err != nil {
		return nil
	}
	v := message.View(rec)
	if string(v.UniqKey()) != uniq || v.StoreTimestamp() < from {
		return nil
	}
	e := &message.Message{QueueID: v.QueueID(), QueueOffset: v.QueueOffset(), PhysOffset: v.PhysOffset(), StoreTimestamp: v.StoreTimestamp()}
	if recTopic != topic {
		rt, _ := v.Property(message.PropRealTopic)
		qs, _ := v.Property(message.PropRealQueueID)
		q, err := strconv.ParseInt(string(qs), 10, 32)
		if string(rt) != topic || err != nil {
			return nil
		}
		e.QueueID = int32(q)
	}
	return e
}
