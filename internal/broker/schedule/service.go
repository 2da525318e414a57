package schedule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// Store is what the service needs of the message store (*store.Store
// satisfies it).
type Store interface {
	PutMessage(ctx context.Context, m *message.Message) store.PutResult
	PutMessages(ctx context.Context, ms []*message.Message) store.PutResult
	GetMessage(topic string, queueID int32, offset int64, maxCount, maxBytes int, f store.Filter) (*store.GetResult, error)
	MinOffset(topic string, queueID int32) int64
	MaxOffset(topic string, queueID int32) int64
	Queues(topic string) []int32
}

// flusher is implemented by stores that can make every appended record
// durable on demand; the service calls it before persisting cursors.
type flusher interface{ Flush() error }

// Defaults.
const (
	DefaultReadBatch     = 32
	DefaultReadBytes     = 8 << 20
	DefaultPutBatchBytes = 1 << 20
	DefaultRoundBudget   = 1024
	DefaultRetryInterval = time.Second
	DefaultDispatchWait  = 10 * time.Millisecond
)

// Config configures a Service.
type Config struct {
	// Dir is the data root; the cursors live in <Dir>/config/delayOffset.json.
	Dir string
	FS  vfs.FS // nil = vfs.OS{}
	// DelayLevels is messageDelayLevel: level n (1-based) waits
	// DelayLevels[n-1]. Nil = DefaultDelayLevels().
	DelayLevels []time.Duration
	// MaxTimerDelay bounds how far ahead a timer may be (timerMaxDelaySec,
	// 3 days); at most 2^TimerQueues seconds.
	MaxTimerDelay time.Duration
	ReadBatch     int           // entries read per GetMessage (32)
	ReadBytes     int           // bytes read per GetMessage (8 MiB; at least one record)
	RoundBudget   int           // entries one queue handles per round before the others get a turn (1024)
	PutBatchBytes int           // body+properties bytes per combined append of due entries (1 MiB)
	RetryInterval time.Duration // wait after a failed put or cursor write (1s)
	// DispatchWait is the re-check interval while an entry Schedule stored is
	// not yet visible to readers (10ms); OnDispatch usually wakes sooner.
	DispatchWait time.Duration
	Clock        Clock        // nil = SystemClock{}; must match the store's clock
	Logger       *slog.Logger // nil = discard
	// OnCursors, if set, is given every cursor write (topic -> queue ->
	// next offset) after the deliveries it covers are durable and before
	// the cursor file: a master serving slaves logs it so that the
	// progress travels with the log (core.Broker.LogDelayProgress). An
	// error is a failed cursor write (retried).
	OnCursors func(map[string]map[int32]int64) error
}

func (c *Config) setDefaults() {
	if c.FS == nil {
		c.FS = vfs.OS{}
	}
	if c.DelayLevels == nil {
		c.DelayLevels = DefaultDelayLevels()
	}
	c.DelayLevels = slices.Clone(c.DelayLevels)
	if c.MaxTimerDelay == 0 {
		c.MaxTimerDelay = DefaultMaxTimerDelay
	}
	setDef(&c.ReadBatch, DefaultReadBatch)
	setDef(&c.ReadBytes, DefaultReadBytes)
	setDef(&c.RoundBudget, DefaultRoundBudget)
	setDef(&c.PutBatchBytes, DefaultPutBatchBytes)
	setDef(&c.RetryInterval, DefaultRetryInterval)
	setDef(&c.DispatchWait, DefaultDispatchWait)
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

func setDef[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Validate reports the first invalid setting (after defaults).
func (c *Config) Validate() error {
	if c.Dir == "" {
		return errors.New("schedule: config: Dir is empty")
	}
	if len(c.DelayLevels) == 0 || len(c.DelayLevels) > MaxLevels {
		return fmt.Errorf("schedule: config: %d delay levels, want 1..%d", len(c.DelayLevels), MaxLevels)
	}
	for i, d := range c.DelayLevels {
		if d <= 0 {
			return fmt.Errorf("schedule: config: delay level %d is %v, must be positive", i+1, d)
		}
	}
	if c.MaxTimerDelay < 0 || c.MaxTimerDelay > TimerQueueDelay(TimerQueues-1)*2 {
		return fmt.Errorf("schedule: config: MaxTimerDelay %v out of range (0, %v]", c.MaxTimerDelay,
			TimerQueueDelay(TimerQueues-1)*2)
	}
	return nil
}

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("schedule: closed")

// Service stores scheduled messages and delivers them when due.
type Service struct {
	cfg   Config
	st    Store
	log   *slog.Logger
	clock Clock

	queues []*queue        // level queues, then timer queues; fixed after New
	byKey  map[qkey]*queue // read-only after New

	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	started atomic.Bool
	closeMu sync.Mutex
	closed  bool

	// Rounds begun and completed (tests wait on them).
	begun, rounds atomic.Int64
}

// queue is the state of one schedule queue. cursor, saved and the head
// cache belong to the Run goroutine; known is written by Schedule.
type queue struct {
	key    qkey
	cursor int64 // next queue offset to process
	saved  int64 // cursor value in the file
	known  atomic.Int64
	// durable mirrors saved (the cursor at start) for other goroutines:
	// every entry below it was delivered durably (progress.go).
	durable atomic.Int64
	// waitEnd (0: none) is the CommitLog offset the store must confirm
	// before the cursor may be saved past held: deliveries the store
	// wrote but answered FLUSH_SLAVE_TIMEOUT or FLUSH_DISK_TIMEOUT
	// (unconfirmed.go).
	waitEnd, held int64
}

// New loads the cursors and checks them against the store. Schedule works
// at once; deliveries start with Run.
func New(cfg Config, st Store) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ensureCursorDir(cfg.FS, cfg.Dir); err != nil {
		return nil, err
	}
	saved, err := loadCursors(cfg.FS, cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, st: st, log: cfg.Logger, clock: cfg.Clock, byKey: map[qkey]*queue{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	for _, k := range s.queueKeys(saved) {
		q := &queue{key: k}
		q.cursor, q.saved = s.startCursor(k, saved)
		q.durable.Store(q.cursor)
		s.queues = append(s.queues, q)
		s.byKey[k] = q
	}
	return s, nil
}

// queueKeys lists every queue to serve: the configured levels, the timer
// queues, and level queues found in the store or the cursor file.
func (s *Service) queueKeys(saved map[qkey]int64) []qkey {
	n := int32(len(s.cfg.DelayLevels))
	for _, id := range s.st.Queues(LevelTopic) {
		if id < MaxLevels {
			n = max(n, id+1)
		}
	}
	for k := range saved {
		if k.topic == LevelTopic {
			n = max(n, k.id+1)
		}
	}
	keys := make([]qkey, 0, int(n)+TimerQueues)
	for id := range n {
		keys = append(keys, qkey{LevelTopic, id})
	}
	for id := range int32(TimerQueues) {
		keys = append(keys, qkey{TimerTopic, id})
	}
	return keys
}

// startCursor returns the cursor of k at start (and the value on file, -1
// when it must be written): the saved one, clamped to the queue's range.
func (s *Service) startCursor(k qkey, saved map[qkey]int64) (cursor, onFile int64) {
	minOff, maxOff := s.st.MinOffset(k.topic, k.id), s.st.MaxOffset(k.topic, k.id)
	c, ok := saved[k]
	if !ok {
		return minOff, -1
	}
	switch {
	case c > maxOff:
		s.log.Warn("schedule: cursor beyond the end of its queue; the store lost an unflushed tail",
			"topic", k.topic, "queue", k.id, "cursor", c, "maxOffset", maxOff)
		return maxOff, -1
	case c < minOff:
		s.log.Warn("schedule: entries removed by retention before delivery",
			"topic", k.topic, "queue", k.id, "cursor", c, "minOffset", minOff, "lost", minOff-c)
		return minOff, -1
	}
	return c, c
}

// MaxDelayLevel is the highest delay level; higher levels are clamped.
func (s *Service) MaxDelayLevel() int32 { return int32(len(s.cfg.DelayLevels)) }

// DelayLevels returns the configured delays.
func (s *Service) DelayLevels() []time.Duration { return slices.Clone(s.cfg.DelayLevels) }

// Schedule durably stores m for later delivery to m.Topic / m.QueueID: after
// delay level `level` when level > 0, else at deliverAtMs (Unix ms). m is
// rewritten in place into the schedule record (topic, queue, REAL_TOPIC,
// REAL_QID, TIMER_OUT_MS) and stored; on PutOK its QueueOffset, PhysOffset
// and StoreTimestamp describe that record. On failure m is restored.
func (s *Service) Schedule(ctx context.Context, m *message.Message, level int32, deliverAtMs int64) store.PutResult {
	topic, qid, props := m.Topic, m.QueueID, m.Properties
	k, err := s.rewrite(m, level, deliverAtMs)
	if err != nil {
		return store.PutResult{Status: store.PutMessageIllegal, Err: err}
	}
	if len(m.Properties) > message.MaxPropertiesBytes {
		m.Topic, m.QueueID, m.Properties = topic, qid, props
		return store.PutResult{Status: store.PutPropertiesTooLong,
			Err: fmt.Errorf("schedule: properties of %d bytes exceed %d", len(m.Properties), message.MaxPropertiesBytes)}
	}
	res := s.st.PutMessage(ctx, m)
	if res.Status != store.PutOK && res.Status != store.PutFlushDiskTimeout {
		m.Topic, m.QueueID, m.Properties = topic, qid, props
		return res
	}
	if q := s.byKey[k]; q != nil {
		raiseTo(&q.known, m.QueueOffset+1)
	}
	s.kick()
	return res
}

// rewrite turns m into its schedule record and returns the queue it goes to.
func (s *Service) rewrite(m *message.Message, level int32, deliverAtMs int64) (qkey, error) {
	if m.Topic == "" || IsScheduleTopic(m.Topic) {
		return qkey{}, fmt.Errorf("schedule: cannot schedule a message for topic %q", m.Topic)
	}
	if m.QueueID < 0 {
		return qkey{}, fmt.Errorf("schedule: cannot schedule a message for queue %d", m.QueueID)
	}
	var k qkey
	props := m.Properties
	if id, ok := LevelQueue(level, len(s.cfg.DelayLevels)); ok {
		k = qkey{LevelTopic, id}
	} else {
		if deliverAtMs <= 0 {
			return qkey{}, fmt.Errorf("schedule: neither a delay level (%d) nor a delivery time (%d)", level, deliverAtMs)
		}
		d := deliverAtMs - s.clock.Now().UnixMilli()
		if d > s.cfg.MaxTimerDelay.Milliseconds() {
			return qkey{}, fmt.Errorf("schedule: delivery time %d is more than %v ahead", deliverAtMs, s.cfg.MaxTimerDelay)
		}
		k = qkey{TimerTopic, TimerQueue(d)}
		props = message.SetProperty(props, message.PropTimerOutMs, strconv.FormatInt(deliverAtMs, 10))
	}
	// Acknowledged means durable: under SYNC_FLUSH the schedule record is
	// synced before Schedule returns even when the message says WAIT=false
	// (the broker's retry path does); delivery sets WAIT again.
	props = message.DeleteProperty(props, message.PropWaitStoreMsgOK)
	props = message.SetProperty(props, message.PropRealTopic, m.Topic)
	props = message.SetProperty(props, message.PropRealQueueID, strconv.Itoa(int(m.QueueID)))
	m.Topic, m.QueueID, m.Properties = k.topic, k.id, props
	return k, nil
}

func raiseTo(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if cur >= x || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// OnDispatch is a store dispatch listener (or part of one): an entry of a
// schedule queue became visible. It never blocks.
func (s *Service) OnDispatch(topic string, queueID int32, queueOffset int64, tagsCode int64) {
	if IsScheduleTopic(topic) {
		s.kick()
	}
}

func (s *Service) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close stops Run (waiting for it) and persists the cursors. Scheduled
// entries not yet delivered stay stored and are delivered after the next
// start. Idempotent.
func (s *Service) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	started := s.started.Load()
	s.closeMu.Unlock()
	if started {
		<-s.done
		return nil // Run persisted on its way out
	}
	return s.persist()
}

var _ Store = (*store.Store)(nil)
