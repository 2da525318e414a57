package transaction

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// System topics of the engine (RocketMQ's names).
const (
	HalfTopic     = "RMQ_SYS_TRANS_HALF_TOPIC"
	OpTopic       = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
	CheckMaxTopic = "TRANS_CHECK_MAX_TIME_TOPIC"
	// opTag is the TAGS of every op record (RocketMQ's REMOVETAG).
	opTag = "d"
	// PropOpKind is the Keel property of an op record naming the decision.
	PropOpKind = "KEEL_TXN_OP"
)

// Op record kinds (values of PropOpKind).
const (
	OpCommit   = "commit"   // final message stored on the real topic
	OpRollback = "rollback" // producer rolled back
	OpDiscard  = "discard"  // check limit reached; copy in TRANS_CHECK_MAX_TIME_TOPIC
	OpRecheck  = "recheck"  // half re-put with a higher check count for a check-back
)

// Defaults.
const (
	DefaultCheckInterval = 60 * time.Second
	DefaultTimeout       = 6 * time.Second
	DefaultCheckMax      = 15
	DefaultCheckWorkers  = 8
	// DefaultVisibleWait bounds how long END_TRANSACTION waits for a half
	// message that is written but not yet readable (dispatch lag).
	DefaultVisibleWait = 3 * time.Second
)

// ErrBadStateFile reports an unreadable or malformed cursor file.
var ErrBadStateFile = errors.New("transaction: bad state file")

// Producers reaches the live producers of a group for check-back, over
// whatever protocol registered them; *broker.Broker implements it.
type Producers interface {
	// HasProducer reports whether group has a live producer to ask.
	HasProducer(group string) bool
	// CheckTransaction asks one live producer of group about a
	// transaction, without waiting for the answer (which comes back as
	// End); an error means the question was not sent.
	CheckTransaction(group string, c core.TransactionCheck) error
}

// Config configures an Engine.
type Config struct {
	Store     *store.Store // required, open
	Producers Producers    // required
	// StoreHost is the broker's advertised address (the store host of the
	// records it writes).
	StoreHost netip.AddrPort
	// Dir is the store root; the cursor file is <Dir>/config/transaction.json.
	Dir string
	FS  vfs.FS // nil = vfs.OS{}

	CheckInterval time.Duration // transactionCheckInterval (60 s)
	Timeout       time.Duration // transactionTimeOut (6 s)
	CheckMax      int           // transactionCheckMax (15)
	CheckWorkers  int           // check-backs processed in parallel per round (8)
	VisibleWait   time.Duration // see DefaultVisibleWait

	Now    func() time.Time // nil = time.Now; must be the store's clock
	Logger *slog.Logger     // nil discards
}

func (c *Config) applyDefaults() {
	if c.FS == nil {
		c.FS = vfs.OS{}
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.CheckMax <= 0 {
		c.CheckMax = DefaultCheckMax
	}
	if c.CheckWorkers <= 0 {
		c.CheckWorkers = DefaultCheckWorkers
	}
	if c.VisibleWait <= 0 {
		c.VisibleWait = DefaultVisibleWait
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// half is one undecided half message (an entry of the half queue).
type half struct {
	offset   int64 // half queue offset
	phys     int64 // CommitLog offset
	storeTs  int64 // ms
	txn      *txn
	topic    string // REAL_TOPIC
	queueID  int32  // REAL_QID
	group    string // PGROUP
	checks   int32  // TRANSACTION_CHECK_TIMES
	immunity int64  // CHECK_IMMUNITY_TIME_IN_SECONDS in ms (first check only)
}

// txn is one undecided transaction: every live half with its transaction
// id (normally one; more after a producer retried the prepared send, or
// after a crash between a re-put and its op record).
type txn struct {
	id     string
	halves []*half // ascending offsets
	// unverified: a final message may already exist (found at recovery,
	// registered from the queue, or after a failed write); the index is
	// consulted before committing it.
	unverified bool
	busy       chan struct{} // non-nil while an END or a check works on it
}

func (t *txn) newest() *half { return t.halves[len(t.halves)-1] }

// Stats are the engine's counters.
type Stats struct {
	Prepared, Committed, RolledBack, Discarded int64
	DuplicateEnds                              int64 // END for a transaction already decided
	Checks                                     int64 // CHECK_TRANSACTION_STATE sent
	NoProducer                                 int64 // due checks skipped: no producer online
	AlreadyCommitted                           int64 // commits found already done (index check)
	Pending                                    int   // undecided half messages
}

// Engine stores half messages and decides them. See the package doc.
type Engine struct {
	cfg Config
	st  *store.Store
	log *slog.Logger

	mu       sync.Mutex
	halves   map[int64]*half // undecided, by half queue offset
	txns     map[string]*txn
	resolved *offsetSet      // half offsets with an op record
	halfSeen int64           // every half offset below is in halves or resolved
	ops      map[int64]int64 // op queue offset -> highest half offset it names (-1: none)
	opSeen   int64           // every op offset below opLow.. is in ops
	opLow    int64           // ops below are trimmed

	roundMu  sync.Mutex // serialises check rounds and persists; guards prevCand, saved
	prevCand *cursors   // cursor candidate of the previous persist
	saved    cursors    // last written cursor file

	prepared, committed, rolledBack, discarded atomic.Int64
	dupEnds, checks, noProducer, alreadyDone   atomic.Int64

	closeOnce sync.Once
	closed    chan struct{}
	wake      chan struct{}
	runMu     sync.Mutex
	stopping  bool
	wg        sync.WaitGroup
}

// New opens the engine on an open store: it reads the cursor file and
// rebuilds the undecided half messages from the op and half queues.
func New(cfg Config) (*Engine, error) {
	cfg.applyDefaults()
	if cfg.Store == nil || cfg.Producers == nil {
		return nil, errors.New("transaction: Store and Producers are required")
	}
	if cfg.Dir == "" {
		return nil, errors.New("transaction: Dir is required")
	}
	e := &Engine{
		cfg: cfg, st: cfg.Store, log: cfg.Logger,
		halves: map[int64]*half{}, txns: map[string]*txn{}, ops: map[int64]int64{},
		closed: make(chan struct{}), wake: make(chan struct{}, 1),
	}
	if err := e.recover(); err != nil {
		return nil, err
	}
	return e, nil
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	n := len(e.halves)
	e.mu.Unlock()
	return Stats{
		Prepared: e.prepared.Load(), Committed: e.committed.Load(), RolledBack: e.rolledBack.Load(),
		Discarded: e.discarded.Load(), DuplicateEnds: e.dupEnds.Load(), Checks: e.checks.Load(),
		NoProducer: e.noProducer.Load(), AlreadyCommitted: e.alreadyDone.Load(), Pending: n,
	}
}

// Prepare stores m (a TRAN_MSG send to m.Topic / m.QueueID) as a half
// message in HalfTopic queue 0. On PutOK (and PutFlushDiskTimeout, where
// the broker also reports the offsets) m's QueueOffset, PhysOffset and
// StoreTimestamp describe the stored half record.
func (e *Engine) Prepare(ctx context.Context, m *message.Message) store.PutResult {
	uniq, _ := message.Property(m.Properties, message.PropUniqKey)
	group, _ := message.Property(m.Properties, message.PropProducerGroup)
	if uniq == "" || group == "" {
		return store.PutResult{Status: store.PutMessageIllegal,
			Err: errors.New("transaction: a transaction message needs the UNIQ_KEY and PGROUP properties")}
	}
	props := message.SetProperty(m.Properties, message.PropRealTopic, m.Topic)
	props = message.SetProperty(props, message.PropRealQueueID, strconv.Itoa(int(m.QueueID)))
	props = message.SetProperty(props, message.PropTransactionID, uniq)
	h := *m
	h.Topic, h.QueueID, h.Properties = HalfTopic, 0, props
	h.SysFlag &^= message.FlagTxMask
	res := e.st.PutMessage(ctx, &h)
	if !written(res.Status) {
		return res
	}
	m.QueueOffset, m.PhysOffset, m.StoreTimestamp = h.QueueOffset, h.PhysOffset, h.StoreTimestamp
	e.prepared.Add(1)
	hf := &half{offset: h.QueueOffset, phys: h.PhysOffset, storeTs: h.StoreTimestamp,
		topic: m.Topic, queueID: m.QueueID, group: group}
	hf.immunity = immunityMs(props)
	e.mu.Lock()
	e.addHalfLocked(hf, uniq, res.Status != store.PutOK)
	e.mu.Unlock()
	return res
}

func immunityMs(props string) int64 {
	v, ok := message.Property(props, message.PropCheckImmunitySeconds)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return min(n, 1<<31) * 1000
}

// addHalfLocked registers an undecided half unless it is known already.
func (e *Engine) addHalfLocked(hf *half, id string, unverified bool) {
	if e.resolved.has(hf.offset) || e.halves[hf.offset] != nil {
		return
	}
	t := e.txns[id]
	if t == nil {
		t = &txn{id: id}
		e.txns[id] = t
	}
	t.unverified = t.unverified || unverified
	hf.txn = t
	i := len(t.halves)
	for i > 0 && t.halves[i-1].offset > hf.offset {
		i--
	}
	t.halves = append(t.halves, nil)
	copy(t.halves[i+1:], t.halves[i:])
	t.halves[i] = hf
	e.halves[hf.offset] = hf
}

// halfFromRecord describes a stored half record (v passed message.Check).
func halfFromRecord(v message.View) (*half, string, error) {
	props := string(v.Properties())
	id, _ := message.Property(props, message.PropTransactionID)
	if id == "" {
		id, _ = message.Property(props, message.PropUniqKey)
	}
	topic, _ := message.Property(props, message.PropRealTopic)
	qs, _ := message.Property(props, message.PropRealQueueID)
	qid, err := strconv.ParseInt(qs, 10, 32)
	if id == "" || topic == "" || err != nil || qid < 0 {
		return nil, "", fmt.Errorf("transaction: half message at offset %d lacks a transaction id, REAL_TOPIC or REAL_QID", v.PhysOffset())
	}
	group, _ := message.Property(props, message.PropProducerGroup)
	checks, _ := message.Property(props, message.PropTransactionCheckTimes)
	n, _ := strconv.ParseInt(checks, 10, 32)
	return &half{offset: v.QueueOffset(), phys: v.PhysOffset(), storeTs: v.StoreTimestamp(),
		topic: topic, queueID: int32(qid), group: group, checks: int32(max(n, 0)), immunity: immunityMs(props)}, id, nil
}

// applyOpLocked records an op record: the halves it names are decided.
// It is idempotent (an op may be seen both when written and when read
// back from the queue).
func (e *Engine) applyOpLocked(opOffset int64, halfOffsets []int64) {
	hi := int64(-1)
	for _, o := range halfOffsets {
		hi = max(hi, o)
		e.resolved.add(o)
		hf := e.halves[o]
		if hf == nil {
			continue
		}
		delete(e.halves, o)
		t := hf.txn
		for i, x := range t.halves {
			if x == hf {
				t.halves = append(t.halves[:i], t.halves[i+1:]...)
				break
			}
		}
		if len(t.halves) == 0 && t.busy == nil {
			delete(e.txns, t.id)
		}
	}
	if opOffset >= e.opLow {
		e.ops[opOffset] = hi
	}
}

// writeOp stores an op record naming halves and applies it.
func (e *Engine) writeOp(ctx context.Context, id, kind string, halves []*half) store.PutResult {
	offs := make([]int64, len(halves))
	body := make([]byte, 0, 12*len(halves))
	for i, h := range halves {
		offs[i] = h.offset
		if i > 0 {
			body = append(body, ',')
		}
		body = strconv.AppendInt(body, h.offset, 10)
	}
	props := message.EncodeProperties(map[string]string{
		message.PropTags: opTag, PropOpKind: kind, message.PropTransactionID: id,
	})
	now := e.cfg.Now().UnixMilli()
	m := &message.Message{Topic: OpTopic, QueueID: 0, BornTimestamp: now,
		BornHost: e.cfg.StoreHost, StoreHost: e.cfg.StoreHost, Body: body, Properties: props}
	res := e.st.PutMessage(ctx, m)
	if !written(res.Status) {
		return res
	}
	e.mu.Lock()
	e.applyOpLocked(m.QueueOffset, offs)
	e.mu.Unlock()
	return res
}

// parseOpBody reads the comma-separated half offsets of an op record.
func parseOpBody(body []byte) []int64 {
	var out []int64
	start := 0
	for i := 0; i <= len(body); i++ {
		if i < len(body) && body[i] != ',' {
			continue
		}
		if n, err := strconv.ParseInt(string(body[start:i]), 10, 64); err == nil && n >= 0 {
			out = append(out, n)
		}
		start = i + 1
	}
	return out
}

// lockTxn waits until no one else works on transaction id and marks it
// busy. It returns nil when the transaction has no undecided half.
func (e *Engine) lockTxn(ctx context.Context, id string) (*txn, error) {
	for {
		e.mu.Lock()
		t := e.txns[id]
		if t == nil || len(t.halves) == 0 {
			e.mu.Unlock()
			return nil, nil
		}
		if t.busy == nil {
			t.busy = make(chan struct{})
			e.mu.Unlock()
			return t, nil
		}
		ch := t.busy
		e.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// tryLockTxn is lockTxn without waiting (nil when busy or decided).
func (e *Engine) tryLockTxn(id string) *txn {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.txns[id]
	if t == nil || len(t.halves) == 0 || t.busy != nil {
		return nil
	}
	t.busy = make(chan struct{})
	return t
}

func (e *Engine) unlockTxn(t *txn) {
	e.mu.Lock()
	close(t.busy)
	t.busy = nil
	if len(t.halves) == 0 && e.txns[t.id] == t {
		delete(e.txns, t.id)
	}
	e.mu.Unlock()
}

// liveHalves copies t's undecided halves (t must be locked by the caller).
func (e *Engine) liveHalves(t *txn) []*half {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*half(nil), t.halves...)
}
