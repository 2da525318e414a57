package kafka

// Transactions (exactly-once): this broker is the transaction coordinator
// of every transactional.id (FindCoordinator key type 1 names it, as for
// groups). Per transactional.id the coordinator keeps a producer id, its
// epoch, the transaction timeout, a state and, while a transaction is
// open, its partitions (each with the high watermark when it was added:
// its first batch cannot be before it) and the offsets TxnOffsetCommit
// gave it per group:
//
//	Empty / CompleteCommit / CompleteAbort
//	   -- AddPartitionsToTxn, AddOffsetsToTxn -->  Ongoing (timer starts)
//	Ongoing -- EndTxn(commit) -->  PrepareCommit -- markers, offsets --> CompleteCommit
//	Ongoing -- EndTxn(abort), InitProducerId, timeout --> PrepareAbort -- markers --> CompleteAbort
//
// Every change of an entry is first a system record of the CommitLog
// (record.KindKafkaTxn, txnlog.go) holding the whole new entry, and is
// acknowledged once that record is Confirmed (flushed under SYNC_FLUSH,
// replicated on a SYNC_MASTER); so it survives a crash and reaches the
// slaves with the messages. Completing a transaction writes a control
// batch (commit or abort marker, txnmarker.go) into each of its
// partitions, waits until they are Confirmed and visible, commits its
// offsets (a commit) into the core's offset table, durably, and then logs
// the Complete state; EndTxn is answered after that. A crash in between
// leaves the Prepare state in the log: at start the coordinator completes
// it again (a marker may be written twice; a second one closes nothing).
//
// Fencing: InitProducerId bumps the epoch (an open transaction is aborted
// first), so the older producer's Produce answers INVALID_PRODUCER_EPOCH
// and its AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn
// PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for versions below 2, as Kafka
// answers them). A transaction open longer than its
// transaction.timeout.ms is aborted by the broker with the epoch bumped,
// which fences its producer likewise.
//
// Per partition, the open transactions (their first possible offsets)
// give the last stable offset (LSO) and the completed aborts (producer
// id, first offset, marker offset) the AbortedTransactions of a
// read_committed Fetch (txnread.go).
//
// Locks: each transactional.id has a mutex held across a request on it
// (and across the markers' writes); c.mu guards the maps and is never
// held across a store wait nor while a partition's appendMu is taken
// (Produce takes c.mu briefly under appendMu).

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	errInvalidProducerIDMapping int16 = 49
	errInvalidTxnState          int16 = 48
	errInvalidTxnTimeout        int16 = 50
	errConcurrentTransactions   int16 = 51
	errOperationNotAttempted    int16 = 55
	errProducerFenced           int16 = 90
	errNotCoordinator           int16 = 16
	errUnstableOffsetCommit     int16 = 88
)

type txnState uint8

const (
	txnEmpty txnState = iota
	txnOngoing
	txnPrepareCommit
	txnPrepareAbort
	txnCompleteCommit
	txnCompleteAbort
)

func (t txnState) String() string {
	return [...]string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"}[t]
}

// open reports whether a transaction in state t holds back its
// partitions' LSO.
func (t txnState) open() bool {
	return t == txnOngoing || t == txnPrepareCommit || t == txnPrepareAbort
}

// txnPart is a partition of a transaction: the client's partition number
// and this broker's queue, and the high watermark when it was added.
type txnPart struct {
	Topic     string `json:"t"`
	Partition int32  `json:"p"`
	Queue     int32  `json:"q"`
	Start     int64  `json:"s"`
}

// txnOffset is an offset TxnOffsetCommit gave a transaction.
type txnOffset struct {
	Topic     string `json:"t"`
	Partition int32  `json:"p"`
	Offset    int64  `json:"o"`
}

// txnEntry is the coordinator's state of one transactional.id (what each
// system record holds whole).
type txnEntry struct {
	ID        string                 `json:"id"`
	PID       int64                  `json:"pid"`
	Epoch     int16                  `json:"epoch"`
	TimeoutMs int32                  `json:"timeoutMs"`
	State     txnState               `json:"state"`
	StartMs   int64                  `json:"startMs,omitempty"` // when it became Ongoing
	Parts     []txnPart              `json:"parts,omitempty"`
	Groups    []string               `json:"groups,omitempty"`
	Offsets   map[string][]txnOffset `json:"offsets,omitempty"`   // by group
	UpdatedMs int64                  `json:"updatedMs,omitempty"` // when it last changed
	// TimedOut is the epoch a timeout abort fenced (Kafka's
	// lastProducerEpoch): its producer may recover with InitProducerId
	// naming it (KIP-360); nil once an InitProducerId bumped the epoch.
	TimedOut *int16 `json:"timedOut,omitempty"`
}

func (e *txnEntry) clone() *txnEntry {
	c := *e
	c.Parts = slices.Clone(e.Parts)
	c.Groups = slices.Clone(e.Groups)
	if e.Offsets != nil {
		c.Offsets = make(map[string][]txnOffset, len(e.Offsets))
		for g, o := range e.Offsets {
			c.Offsets[g] = slices.Clone(o)
		}
	}
	return &c
}

func (e *txnEntry) hasPart(topic string, queue int32) bool {
	return slices.ContainsFunc(e.Parts, func(p txnPart) bool { return p.Topic == topic && p.Queue == queue })
}

// abortedTxn is a completed abort in a partition: batches of PID from
// First up to the marker at Last are to be dropped by read_committed
// consumers.
type abortedTxn struct {
	PID   int64 `json:"pid"`
	First int64 `json:"first"`
	Last  int64 `json:"last"`
}

type txnSlot struct {
	mu sync.Mutex // held across a request on this transactional.id
	e  *txnEntry  // nil until InitProducerId (guarded by txnCoord.mu)
}

// txnCoord is the transaction coordinator's state.
type txnCoord struct {
	mu      sync.Mutex
	byID    map[string]*txnSlot
	byPID   map[int64]*txnSlot
	open    map[queueKey]map[int64]int64 // per partition: producer id -> first possible offset
	active  map[string]*txnSlot          // the ids whose transaction is open (the timeout loop reads these only)
	pending map[string]int               // per group: open transactions holding offsets of it
	aborted map[queueKey][]abortedTxn    // per partition, in marker order
	lastEnd int64                        // CommitLog end of the last record applied (the snapshot point)
	dirty   bool                         // changed since the last snapshot
	wake    chan struct{}                // a transaction became Ongoing, or one is to be completed
	changed chan struct{}                // the state changed (the snapshot writer waits on it)
}

func newTxnCoord() *txnCoord {
	return &txnCoord{byID: map[string]*txnSlot{}, byPID: map[int64]*txnSlot{}, open: map[queueKey]map[int64]int64{},
		active: map[string]*txnSlot{}, pending: map[string]int{},
		aborted: map[queueKey][]abortedTxn{}, wake: make(chan struct{}, 1), changed: make(chan struct{}, 1)}
}

func (c *txnCoord) slot(id string) *txnSlot {
	c.mu.Lock()
	defer c.mu.Unlock()
	sl := c.byID[id]
	if sl == nil {
		sl = &txnSlot{}
		c.byID[id] = sl
	}
	return sl
}

// existing returns the slot of id, or a slot of its own with no entry
// (not kept) when the id is unknown: only InitProducerId makes an id
// known, so requests naming random ids leave nothing behind.
func (c *txnCoord) existing(id string) *txnSlot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sl := c.byID[id]; sl != nil {
		return sl
	}
	return &txnSlot{}
}

// entry returns the slot's entry (nil if none). Any lock.
func (c *txnCoord) entry(sl *txnSlot) *txnEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sl.e
}

// install makes next the entry of its id (c.mu held), with the
// partition indexes and the aborts ab.
func (c *txnCoord) installLocked(next *txnEntry, ab []txnAbortEntry) {
	sl := c.byID[next.ID]
	if sl == nil {
		sl = &txnSlot{}
		c.byID[next.ID] = sl
	}
	if old := sl.e; old != nil {
		if old.State.open() {
			for g := range old.Offsets {
				if c.pending[g]--; c.pending[g] <= 0 {
					delete(c.pending, g)
				}
			}
		}
		for _, p := range old.Parts {
			k := queueKey{p.Topic, p.Queue}
			if m := c.open[k]; m != nil {
				delete(m, old.PID)
				if len(m) == 0 {
					delete(c.open, k)
				}
			}
		}
		if old.PID != next.PID && c.byPID[old.PID] == sl {
			delete(c.byPID, old.PID)
		}
	}
	sl.e = next
	c.byPID[next.PID] = sl
	delete(c.active, next.ID)
	if next.State.open() {
		c.active[next.ID] = sl
		for g := range next.Offsets {
			c.pending[g]++
		}
		for _, p := range next.Parts {
			k := queueKey{p.Topic, p.Queue}
			if c.open[k] == nil {
				c.open[k] = map[int64]int64{}
			}
			c.open[k][next.PID] = p.Start
		}
	}
	for _, a := range ab {
		k := queueKey{a.Topic, a.Queue}
		c.aborted[k] = append(c.aborted[k], abortedTxn{PID: a.PID, First: a.First, Last: a.Last})
	}
	c.dirty = true
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// fenced is the code for an epoch below the current one on a
// coordinator request of version v (PRODUCER_FENCED from v2; Kafka maps
// it to INVALID_PRODUCER_EPOCH for older clients).
func fenced(v int16) int16 {
	if v < 2 {
		return errInvalidProducerEpoch
	}
	return errProducerFenced
}

// lockProducer takes the lock of transactional id's slot and checks the
// request's producer id and epoch against its entry: it returns the slot
// (locked: the caller unlocks sl.mu) and its entry, or the code a refused
// request answers (then nothing is held).
func (s *Server) lockProducer(id string, pid int64, epoch, version int16) (*txnSlot, *txnEntry, int16) {
	c := s.txn
	sl := c.existing(id)
	sl.mu.Lock()
	e := c.entry(sl)
	if code := checkProducer(e, pid, epoch, version); code != errNone {
		sl.mu.Unlock()
		return nil, nil, code
	}
	return sl, e, errNone
}

// checkProducer checks the producer id and epoch a coordinator request
// names against the entry.
func checkProducer(e *txnEntry, pid int64, epoch int16, version int16) int16 {
	switch {
	case e == nil || e.PID != pid:
		return errInvalidProducerIDMapping
	case epoch < e.Epoch:
		return fenced(version)
	case epoch > e.Epoch:
		return errInvalidProducerEpoch
	}
	return errNone
}

// initTxnProducer is InitProducerId with a transactional.id.
func (s *Server) initTxnProducer(req *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	id := *req.TransactionalID
	switch {
	case id == "":
		resp.ErrorCode = errInvalidRequest
		return resp
	case req.TransactionTimeoutMillis <= 0 || int64(req.TransactionTimeoutMillis) > s.cfg.MaxTransactionTimeout.Milliseconds():
		resp.ErrorCode = errInvalidTxnTimeout
		return resp
	}
	if code := s.txnReady(); code != errNone {
		resp.ErrorCode = code
		return resp
	}
	c := s.txn
	sl := c.slot(id)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	e := c.entry(sl)
	if e != nil && req.ProducerID >= 0 { // KIP-360: the producer names itself
		switch {
		case req.ProducerID != e.PID:
			resp.ErrorCode = errInvalidProducerIDMapping
			return resp
		case req.ProducerEpoch != e.Epoch && (e.TimedOut == nil || *e.TimedOut != req.ProducerEpoch):
			resp.ErrorCode = errProducerFenced
			if req.Version < 4 {
				resp.ErrorCode = errInvalidProducerEpoch
			}
			return resp
		}
	}
	if e != nil && (e.State == txnPrepareCommit || e.State == txnPrepareAbort) {
		// Being completed (after a restart, by the coordinator's loop):
		// finish it here.
		if code := s.completeTxn(sl, e); code != errNone {
			resp.ErrorCode = code
			return resp
		}
		e = c.entry(sl)
	}
	if e != nil && e.State == txnOngoing {
		// The open transaction is aborted under a bumped epoch, which
		// fences the producer that opened it; the epoch the caller gets
		// is bumped again below (Kafka's client retries and gets that).
		abort := e.clone()
		abort.State = txnPrepareAbort
		if abort.Epoch < 32766 {
			abort.Epoch++
		}
		if code := s.logTxnWait(abort, nil); code != errNone {
			resp.ErrorCode = code
			return resp
		}
		if code := s.completeTxn(sl, abort); code != errNone {
			resp.ErrorCode = code
			return resp
		}
		e = c.entry(sl)
	}
	var next *txnEntry
	if e == nil || e.Epoch >= 32766 { // a new producer id (epoch exhausted: as Kafka, a new id)
		next = &txnEntry{ID: id, PID: s.pids.next()}
	} else {
		next = e.clone()
		next.Epoch++
	}
	next.TimeoutMs, next.TimedOut = req.TransactionTimeoutMillis, nil
	next.State, next.StartMs, next.Parts, next.Groups, next.Offsets = txnEmpty, 0, nil, nil, nil
	if code := s.logTxnWait(next, nil); code != errNone {
		resp.ErrorCode = code
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = next.PID, next.Epoch
	return resp
}

// txnReady reports whether the coordinator can serve: its state is
// loaded (at Serve) and this broker leads.
func (s *Server) txnReady() int16 {
	if !s.txnLoaded.Load() {
		return errCoordinatorNotAvailable
	}
	if !s.leads() {
		return errNotCoordinator
	}
	return errNone
}

// begin moves an entry to Ongoing (a copy), starting its timer.
func (s *Server) begin(e *txnEntry) *txnEntry {
	next := e.clone()
	if next.State != txnOngoing {
		next.State, next.StartMs, next.Parts, next.Groups, next.Offsets = txnOngoing, s.parts.now().UnixMilli(), nil, nil, nil
	}
	return next
}

func (s *Server) addPartitionsToTxn(req *kmsg.AddPartitionsToTxnRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	answer := func(code func(topic string, p int32) int16) kmsg.Response {
		for _, t := range req.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code(t.Topic, p)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	all := func(code int16) kmsg.Response { return answer(func(string, int32) int16 { return code }) }
	if code := s.txnReady(); code != errNone {
		return all(code)
	}
	sl, e, code := s.lockProducer(req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Version)
	if code != errNone {
		return all(code)
	}
	defer sl.mu.Unlock()
	if e.State == txnPrepareCommit || e.State == txnPrepareAbort {
		return all(errConcurrentTransactions)
	}
	// Every partition is checked first: one refused fails the request,
	// the others answered OPERATION_NOT_ATTEMPTED, as Kafka does.
	cs := s.cluster(false)
	type add struct {
		topic string
		p, q  int32
	}
	var adds []add
	refused := map[queueKey]int16{}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			q, code := s.localQueue(cs, t.Topic, p)
			if code == errNone {
				code = s.checkRead(t.Topic, q)
			}
			if tc, ok := s.core.Topic(t.Topic); code == errNone && ok && isCompacted(tc) {
				code = errPolicyViolation // a compacted topic takes no transactional records (produce.go)
			}
			if code != errNone {
				refused[queueKey{t.Topic, p}] = code
				continue
			}
			adds = append(adds, add{t.Topic, p, q})
		}
	}
	if len(refused) > 0 {
		return answer(func(topic string, p int32) int16 {
			if code, ok := refused[queueKey{topic, p}]; ok {
				return code
			}
			return errOperationNotAttempted
		})
	}
	next := s.begin(e)
	for _, a := range adds {
		if next.hasPart(a.topic, a.q) {
			continue
		}
		part := s.parts.get(a.topic, a.q)
		if err := s.parts.checkFormat(part); err != nil {
			return all(errKafkaStorage)
		}
		next.Parts = append(next.Parts, txnPart{Topic: a.topic, Partition: a.p, Queue: a.q, Start: s.parts.highWatermark(part)})
	}
	if e.State == txnOngoing && len(next.Parts) == len(e.Parts) {
		return all(errNone) // nothing new
	}
	return all(s.logTxnWait(next, nil))
}

func (s *Server) addOffsetsToTxn(req *kmsg.AddOffsetsToTxnRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	if resp.ErrorCode = s.txnReady(); resp.ErrorCode != errNone {
		return resp
	}
	sl, e, code := s.lockProducer(req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Version)
	if resp.ErrorCode = code; code != errNone {
		return resp
	}
	defer sl.mu.Unlock()
	if e.State == txnPrepareCommit || e.State == txnPrepareAbort {
		resp.ErrorCode = errConcurrentTransactions
		return resp
	}
	if e.State == txnOngoing && slices.Contains(e.Groups, req.Group) {
		return resp
	}
	next := s.begin(e)
	next.Groups = append(next.Groups, req.Group)
	resp.ErrorCode = s.logTxnWait(next, nil)
	return resp
}

func (s *Server) txnOffsetCommit(req *kmsg.TxnOffsetCommitRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	answer := func(code func(topic string, p int32) int16) kmsg.Response {
		for _, t := range req.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code(t.Topic, p.Partition)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	all := func(code int16) kmsg.Response { return answer(func(string, int32) int16 { return code }) }
	if code := s.txnReady(); code != errNone {
		return all(code)
	}
	if req.Version >= 3 && (req.Generation >= 0 || req.MemberID != "") {
		s.gmu.Lock()
		code := errNone
		if g := s.groups[req.Group]; g != nil && len(g.members) > 0 {
			_, _, code = s.checkMember(req.Group, req.MemberID, req.Generation)
			if f := s.checkInstance(req.Group, req.InstanceID, req.MemberID); f != errNone {
				code = f
			}
		}
		s.gmu.Unlock()
		if code != errNone {
			return all(code)
		}
	}
	sl, e, code := s.lockProducer(req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Version)
	if code != errNone {
		return all(code)
	}
	defer sl.mu.Unlock()
	if e.State != txnOngoing || !slices.Contains(e.Groups, req.Group) {
		return all(errInvalidTxnState) // AddOffsetsToTxn comes first
	}
	next := e.clone()
	if next.Offsets == nil {
		next.Offsets = map[string][]txnOffset{}
	}
	codes := map[queueKey]int16{}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			code := s.checkRead(t.Topic, p.Partition)
			if code == errNone && p.Offset < 0 {
				code = errOffsetOutOfRange
			}
			codes[queueKey{t.Topic, p.Partition}] = code
			if code != errNone {
				continue
			}
			offs := next.Offsets[req.Group]
			i := slices.IndexFunc(offs, func(o txnOffset) bool { return o.Topic == t.Topic && o.Partition == p.Partition })
			if i < 0 {
				offs = append(offs, txnOffset{Topic: t.Topic, Partition: p.Partition, Offset: p.Offset})
			} else {
				offs[i].Offset = p.Offset
			}
			next.Offsets[req.Group] = offs
		}
	}
	if code := s.logTxnWait(next, nil); code != errNone {
		return all(code)
	}
	return answer(func(topic string, p int32) int16 { return codes[queueKey{topic, p}] })
}

func (s *Server) endTxn(req *kmsg.EndTxnRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	if resp.ErrorCode = s.txnReady(); resp.ErrorCode != errNone {
		return resp
	}
	sl, e, code := s.lockProducer(req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Version)
	if resp.ErrorCode = code; code != errNone {
		return resp
	}
	defer sl.mu.Unlock()
	switch {
	case e.State == txnOngoing:
		next := e.clone()
		next.State = txnPrepareAbort
		if req.Commit {
			next.State = txnPrepareCommit
		}
		if resp.ErrorCode = s.logTxnWait(next, nil); resp.ErrorCode != errNone {
			return resp
		}
		resp.ErrorCode = s.completeTxn(sl, next)
	case e.State == txnPrepareCommit && req.Commit, e.State == txnPrepareAbort && !req.Commit:
		resp.ErrorCode = s.completeTxn(sl, e) // a retry of one interrupted
	case e.State == txnCompleteCommit && req.Commit, e.State == txnCompleteAbort && !req.Commit:
		// A retry of one already completed.
	default:
		resp.ErrorCode = errInvalidTxnState
	}
	return resp
}

// completeTxn writes the markers of e (in a Prepare state, already
// logged), commits its offsets when it commits, and logs the Complete
// state. sl.mu is held.
func (s *Server) completeTxn(sl *txnSlot, e *txnEntry) int16 {
	commit := e.State == txnPrepareCommit
	var until int64 = -1
	var ab []txnAbortEntry
	for _, p := range e.Parts {
		marker, end, code := s.writeMarker(p.Topic, p.Queue, e.PID, e.Epoch, commit)
		if code != errNone {
			return code
		}
		until = max(until, end)
		if !commit {
			ab = append(ab, txnAbortEntry{Topic: p.Topic, Queue: p.Queue, PID: e.PID, First: p.Start, Last: marker})
		}
	}
	if until >= 0 {
		if code := s.waitConfirmed(until, int32(s.st.ConfirmTimeout().Milliseconds())+1000); code != errNone {
			return errCoordinatorNotAvailable // the markers are written: a retry goes on
		}
	}
	if commit && len(e.Offsets) > 0 {
		for _, g := range slices.Sorted(maps.Keys(e.Offsets)) {
			for _, o := range e.Offsets[g] {
				if code := s.commitPartition(g, o.Topic, o.Partition, o.Offset); code != errNone {
					s.log.Warn("kafka: transaction offset not committed", "transactional_id", e.ID, "group", g, "topic", o.Topic, "partition", o.Partition, "code", code)
				}
			}
		}
		if err := s.core.FlushOffsets(); err != nil {
			s.log.Error("kafka: transaction offsets not durable", "transactional_id", e.ID, "err", err)
			return errCoordinatorNotAvailable
		}
	}
	next := e.clone()
	next.State = txnCompleteAbort
	if commit {
		next.State = txnCompleteCommit
	}
	next.Parts, next.Groups, next.Offsets, next.StartMs = nil, nil, nil, 0
	return s.logTxnWait(next, ab)
}

// runTxnTimeouts aborts the transactions open past their timeout (with
// the epoch bumped: their producers are fenced) and completes the ones a
// restart left in a Prepare state. It sleeps while no transaction is
// open.
func (s *Server) runTxnTimeouts() {
	defer s.wg.Done()
	c := s.txn
	for {
		wait := time.Duration(-1)
		var now int64
		type due struct {
			sl *txnSlot
			e  *txnEntry
		}
		var todo []due
		c.mu.Lock()
		if len(c.active) > 0 { // the clock is read only when needed
			now = s.parts.now().UnixMilli()
		}
		for _, sl := range c.active {
			e := sl.e
			switch {
			case e == nil:
			case e.State == txnPrepareCommit || e.State == txnPrepareAbort:
				todo = append(todo, due{sl, e})
			case e.State == txnOngoing:
				left := time.Duration(e.StartMs+int64(e.TimeoutMs)-now) * time.Millisecond
				if left <= 0 {
					todo = append(todo, due{sl, e})
				} else if wait < 0 || left < wait {
					wait = left
				}
			}
		}
		c.mu.Unlock()
		for _, d := range todo {
			if s.ctx.Err() != nil {
				return
			}
			s.expireTxn(d.sl, d.e)
		}
		if len(todo) > 0 && (wait < 0 || wait > s.cfg.TxnRetryInterval) {
			wait = s.cfg.TxnRetryInterval // a completion that failed is tried again
		}
		var timer <-chan time.Time
		var t *time.Timer
		if wait >= 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-s.ctx.Done():
		case <-c.wake:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if s.ctx.Err() != nil {
			return
		}
	}
}

// expireTxn completes a transaction left Prepared, or aborts one past its
// timeout, if it is still in the state it was seen in.
func (s *Server) expireTxn(sl *txnSlot, seen *txnEntry) {
	if !s.leads() {
		return
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	e := s.txn.entry(sl)
	if e != seen {
		return // changed meanwhile
	}
	if e.State == txnOngoing {
		next := e.clone()
		next.State = txnPrepareAbort
		if next.Epoch < 32766 {
			fencedEpoch := next.Epoch
			next.Epoch++ // fences the producer, as Kafka does at a timeout
			next.TimedOut = &fencedEpoch
		}
		s.log.Info("kafka: transaction timed out, aborting", "transactional_id", e.ID, "producer_id", e.PID, "timeout_ms", e.TimeoutMs)
		if code := s.logTxnWait(next, nil); code != errNone {
			s.log.Warn("kafka: transaction abort not logged", "transactional_id", e.ID, "code", code)
			return
		}
		e = next
	}
	if code := s.completeTxn(sl, e); code != errNone {
		s.log.Warn("kafka: transaction not completed; retrying", "transactional_id", e.ID, "state", e.State.String(), "code", code)
	}
}

// txnProduceCheck judges a transactional batch of producer pid, epoch for
// queue k, under the partition's appendMu: its transaction must be open
// (Ongoing) under that epoch with the partition added.
func (s *Server) txnProduceCheck(txnID *string, pid int64, epoch int16, k queueKey) (int16, string) {
	c := s.txn
	c.mu.Lock()
	defer c.mu.Unlock()
	sl := c.byPID[pid]
	var e *txnEntry
	if sl != nil {
		e = sl.e
	}
	switch {
	case txnID == nil:
		return errInvalidRecord, "a transactional batch in a produce request without a transactional id"
	case e == nil || e.ID != *txnID:
		return errInvalidProducerIDMapping, "producer id " + itoa(pid) + " is not the one of transactional id " + *txnID
	case epoch != e.Epoch:
		return errInvalidProducerEpoch, "producer epoch " + itoa(int64(epoch)) + ", the transactional id's is " + itoa(int64(e.Epoch))
	case e.State != txnOngoing || !e.hasPart(k.topic, k.queueID):
		return errInvalidTxnState, "the partition is not in an open transaction of this producer (AddPartitionsToTxn first)"
	}
	return errNone, ""
}

// txnPendingOffset reports whether an open transaction holds an offset of
// group for topic/partition that it has not committed yet.
func (s *Server) txnPendingOffset(group, topic string, partition int32) bool {
	c := s.txn
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[group] == 0 {
		return false
	}
	for _, sl := range c.active {
		e := sl.e
		for _, o := range e.Offsets[group] {
			if o.Topic == topic && o.Partition == partition {
				return true
			}
		}
	}
	return false
}

// expireTxnIDsLocked forgets the transactional ids without an open
// transaction that have not changed for Config.TransactionalIDExpiration
// (Kafka's transactional.id.expiration.ms), as Kafka does: a producer
// coming back with one gets a new producer id. An id whose mutex a request
// holds is left for the next sweep. c.mu is held.
func (s *Server) expireTxnIDsLocked(nowMs int64) {
	c := s.txn
	limit := s.cfg.TransactionalIDExpiration.Milliseconds()
	for id, sl := range c.byID {
		e := sl.e
		if e == nil || e.State.open() || nowMs-e.UpdatedMs <= limit || !sl.mu.TryLock() {
			continue
		}
		delete(c.byID, id)
		if c.byPID[e.PID] == sl {
			delete(c.byPID, e.PID)
		}
		sl.e = nil
		sl.mu.Unlock()
		c.dirty = true
	}
}
