package replication

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/watermark"
	"github.com/keelmq/keel/internal/vfs"
)

// Defaults of the streaming.
const (
	DefaultChunkBytes        = 256 << 10
	DefaultHeartbeatInterval = 500 * time.Millisecond
	// idleTimeout: a connection that delivers no frame this long is dead.
	idleTimeoutHeartbeats = 6
)

// EpochFile is where a replica keeps its epoch history, under the data
// directory.
func EpochFile(dataDir string) string { return filepath.Join(dataDir, "replication", "epochs") }

// MasterConfig configures a Master.
type MasterConfig struct {
	Store      *store.Store
	FS         vfs.FS // nil = vfs.OS{}
	DataDir    string // the epoch file lives under it (EpochFile)
	BrokerName string
	// Sync: a SYNC_MASTER, whose store has ExternalReplication: the master
	// moves the store's Replicated watermark from the in-sync replicas'
	// acks, and refuses sends while fewer than MinInSyncReplicas copies
	// (its own included) are in sync. Unset (ASYNC_MASTER), replicas follow
	// and nothing waits for them.
	Sync              bool
	MinInSyncReplicas int
	// AckTimeout: an in-sync replica that has bytes to acknowledge and
	// acknowledges nothing for this long leaves the in-sync set.
	AckTimeout time.Duration
	ChunkBytes int // 0 = DefaultChunkBytes
	// MaxInFlightBytes bounds what is sent to a replica and not yet
	// acknowledged as received (0 = DefaultMaxInFlightBytes, at least
	// two chunks): a far-behind replica catches up at the pace it
	// writes, with bounded buffers on both sides (pacing.go).
	MaxInFlightBytes int
	// CatchUpBytesPerSecond, if > 0, bounds the rate at which a replica
	// more than MaxInFlightBytes behind is sent old data (reads of
	// segments no longer in the page cache); the live tail is not
	// limited (pacing.go).
	CatchUpBytesPerSecond int64
	HeartbeatInterval     time.Duration // 0 = DefaultHeartbeatInterval
	MaxFrameBytes         int           // 0 = DefaultMaxFrameBytes
	// OnReplicaOffsets, if set, receives the consumer offsets a replica
	// reports as committed on it (offsets.go). It runs on the
	// connection's reader and should not block long.
	OnReplicaOffsets func(replicaID int64, offs []OffsetReport)
	// Secret, if set, is the group's shared secret: a replica must prove
	// it knows it before anything else (auth.go). At least MinSecretBytes.
	Secret []byte
	// TLS, if set, serves every replica connection over TLS with this
	// server configuration (auth.go); nil: plain TCP.
	TLS *tls.Config
	// AuthTimeout bounds a new connection's TLS handshake and
	// authentication (0 = DefaultAuthTimeout).
	AuthTimeout time.Duration
	// Leased: an ASYNC_MASTER under a controller, whose store has
	// ExternalReplication. It acknowledges without its replicas, and
	// only while it holds a lease from the controller (SetLease): it
	// then confirms (moves Replicated) what its own log confirmed, and
	// once the lease ends it confirms nothing more and refuses every send
	// until a new lease comes. Ignored with Sync.
	Leased bool
	// Epoch, if not 0, is the epoch this master starts at (a controller's
	// master epoch); it must be above every epoch of the history. 0: the
	// history's last epoch + 1.
	Epoch  uint32
	Logger *slog.Logger
}

// Master streams its store's CommitLog to the replicas that connect, and,
// as a SYNC_MASTER, confirms records once the in-sync replicas have them.
type Master struct {
	cfg  MasterConfig
	log  *slog.Logger
	hist History

	mu       sync.Mutex
	replicas map[*follower]struct{}
	inSync   atomic.Int32 // followers in the in-sync set
	sleeping atomic.Int64 // an idle watch's timeout while it sleeps (0: until a write), else -1 (sleep)
	// required (SetRequired) are replica ids every confirmation waits
	// for, connected or not; acks is the highest ack seen from each
	// replica id (guarded by mu).
	required []int64
	acks     map[int64]int64

	pendingAuth chan struct{} // a token per connection not yet authenticated (auth.go)
	refused     refusals      // log lines about refused peers (auth.go)

	// fenced is the newest epoch above this master's that it learned of
	// (Fence); from then on it takes no send and confirms nothing.
	fenced atomic.Uint32

	// leaseUntil is when the newest lease (Leased) ends, on the monotonic
	// clock; nil: none yet. leaseLost is set once a lapse was logged.
	leaseUntil atomic.Pointer[time.Time]
	leaseLost  atomic.Bool

	wg sync.WaitGroup
}

// follower is one connected replica.
type follower struct {
	conn      net.Conn // TLS or plain
	raw       net.Conn // the TCP connection under conn
	id        int64
	syncFlush bool
	sent      atomic.Int64 // end of the bytes sent on this connection
	acked     atomic.Int64 // what its acks say it holds (flushed or written)
	pace      pace         // pacing.go
	inSync    bool         // guarded by Master.mu
	gone      bool         // replaced by a newer connection of the same replica; guarded by Master.mu
	progress  time.Time    // last ack that moved, or caught up; guarded by Master.mu
	lastAck   atomic.Int64 // Unix nanoseconds of its last ack, moving or not (status.go)
}

// NewMaster loads (or starts) the epoch history and appends a new epoch
// starting at the store's log end, durably, before anything else is
// written: every start of a master is a new epoch, so bytes a previous
// run wrote and lost in a crash can never be mistaken for what this run
// writes at the same offsets.
func NewMaster(cfg MasterConfig) (*Master, error) {
	if cfg.FS == nil {
		cfg.FS = vfs.OS{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler) // injected, never the global one
	}
	if cfg.ChunkBytes <= 0 {
		cfg.ChunkBytes = DefaultChunkBytes
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if cfg.MaxInFlightBytes <= 0 {
		cfg.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	cfg.MaxInFlightBytes = max(cfg.MaxInFlightBytes, 2*cfg.ChunkBytes)
	if cfg.MinInSyncReplicas < 1 {
		cfg.MinInSyncReplicas = 1
	}
	if cfg.AuthTimeout <= 0 {
		cfg.AuthTimeout = DefaultAuthTimeout
	}
	if n := len(cfg.Secret); n > 0 && n < MinSecretBytes {
		return nil, fmt.Errorf("replication: the shared secret has %d bytes; at least %d are needed", n, MinSecretBytes)
	}
	path := EpochFile(cfg.DataDir)
	if err := vfs.MkdirAllDurable(cfg.FS, filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("replication: %w", err)
	}
	h, err := LoadHistory(cfg.FS, path)
	if err != nil {
		return nil, err
	}
	end := cfg.Store.Offset(store.Written)
	if end > 0 && len(h) == 0 {
		// A log written before replication was configured: its bytes
		// become epoch 1's.
		h = History{{Epoch: 1, Start: 0}}
	}
	next := h.Last().Epoch + 1
	if cfg.Epoch != 0 {
		if cfg.Epoch < next {
			return nil, fmt.Errorf("replication: cannot start as master at epoch %d: the epoch history already holds epoch %d", cfg.Epoch, h.Last().Epoch)
		}
		next = cfg.Epoch
	}
	h = append(h, Epoch{Epoch: next, Start: end})
	if err := SaveHistory(cfg.FS, path, h); err != nil {
		return nil, err
	}
	m := &Master{cfg: cfg, log: cfg.Logger, hist: h, replicas: map[*follower]struct{}{}, acks: map[int64]int64{},
		pendingAuth: make(chan struct{}, maxPendingAuth), refused: refusals{log: cfg.Logger}}
	m.sleeping.Store(-1)
	if cfg.Sync {
		cfg.Leased = false
		m.cfg.Leased = false
	}
	if cfg.Sync || cfg.Leased {
		// Every put, the broker's own too, is refused at once while too
		// few copies are in sync, or without a lease (store.SetPutGate).
		cfg.Store.SetPutGate(m.CheckSend)
	}
	m.log.Info("replication: master", "epoch", h.Last().Epoch, "epoch_start", end, "sync", cfg.Sync,
		"min_in_sync_replicas", cfg.MinInSyncReplicas)
	return m, nil
}

// History returns the master's epoch history.
func (m *Master) History() History { return m.hist }

// Epoch is the epoch this master writes at.
func (m *Master) Epoch() uint32 { return m.hist.Last().Epoch }

// Fence tells the master that the group has, or is electing, a master at
// epoch. Above its own epoch, it stops at once: CheckSend (and the
// store's put gate) refuses every send, and the Replicated watermark no
// longer moves, so a send waiting for its replicas is answered without
// SEND_OK. It never resumes: a master of a newer epoch starts anew.
func (m *Master) Fence(epoch uint32) {
	if epoch <= m.Epoch() {
		return
	}
	for {
		cur := m.fenced.Load()
		if cur >= epoch {
			return
		}
		if m.fenced.CompareAndSwap(cur, epoch) {
			break
		}
	}
	if !m.cfg.Sync && !m.cfg.Leased {
		// An ASYNC_MASTER's store confirms its own writes; without the
		// put gate of a SYNC_MASTER, install one now.
		m.cfg.Store.SetPutGate(m.CheckSend)
	}
	m.log.Warn("replication: fenced: the group has a master at a newer epoch; this master takes no more sends", "epoch", m.Epoch(), "newer_epoch", epoch)
}

// SetRequired makes every later confirmation of a SYNC_MASTER wait for
// the replicas ids (a controller's in-sync set, this master excluded),
// whether they are connected and in sync or not: a replica the
// controller may elect must hold every write the master confirms. nil:
// only the replication's own in-sync set counts.
func (m *Master) SetRequired(ids []int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.required = slices.Clone(ids)
}

// InSyncIDs returns the ids of the replicas in the in-sync set, sorted.
func (m *Master) InSyncIDs() []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []int64
	for f := range m.replicas {
		if f.inSync {
			ids = append(ids, f.id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

func (m *Master) inSyncLocked(id int64) bool {
	for f := range m.replicas {
		if f.id == id && f.inSync {
			return true
		}
	}
	return false
}

// Fenced is the newer epoch Fence was told of (0: none).
func (m *Master) Fenced() uint32 { return m.fenced.Load() }

// InSync returns how many copies are in sync, the master's included.
func (m *Master) InSync() int { return 1 + int(m.inSync.Load()) }

// CheckSend is the send path's check before anything is stored: a
// SYNC_MASTER with fewer than MinInSyncReplicas copies in sync refuses
// (PutInSyncReplicasNotEnough); otherwise PutOK. A SYNC_MASTER also
// installs it as its store's put gate, so the broker's own writes
// (scheduled deliveries, retries, transaction records) are refused the
// same way instead of waiting out the replication timeout.
func (m *Master) CheckSend() store.PutResult {
	if f := m.fenced.Load(); f != 0 {
		return store.PutResult{Status: store.PutServiceNotAvailable,
			Err: fmt.Errorf("replication: this master (epoch %d) was replaced: the group has a master at epoch %d or later; the message was not stored", m.Epoch(), f)}
	}
	if m.cfg.Leased && !m.LeaseHeld(time.Now()) {
		return store.PutResult{Status: store.PutServiceNotAvailable,
			Err: fmt.Errorf("replication: this master (epoch %d) holds no lease from the controllers (it may be cut off from them): it takes no sends until a lease is renewed; the message was not stored", m.Epoch())}
	}
	if m.cfg.Sync {
		if n := m.InSync(); n < m.cfg.MinInSyncReplicas {
			return store.PutResult{Status: store.PutInSyncReplicasNotEnough,
				Err: fmt.Errorf("replication: %d of the %d copies minInSyncReplicas requires are in sync; the message was not stored", n, m.cfg.MinInSyncReplicas)}
		}
	}
	return store.PutResult{Status: store.PutOK}
}

// SetLease records a lease from the controllers (Leased): the master may
// acknowledge writes until until (a time.Now-based instant, so compared
// on the monotonic clock). A lease ending before the one held changes
// nothing.
func (m *Master) SetLease(until time.Time) {
	for {
		cur := m.leaseUntil.Load()
		if cur != nil && !until.After(*cur) {
			return
		}
		if m.leaseUntil.CompareAndSwap(cur, &until) {
			break
		}
	}
	if time.Now().Before(until) && m.leaseLost.CompareAndSwap(true, false) {
		m.log.Info("replication: lease renewed; taking sends again", "epoch", m.Epoch())
	}
}

// LeaseHeld reports whether a Leased master holds a lease at now (always
// true without Leased).
func (m *Master) LeaseHeld(now time.Time) bool {
	if !m.cfg.Leased {
		return true
	}
	u := m.leaseUntil.Load()
	return u != nil && now.Before(*u)
}

// Acknowledges reports whether the master acknowledges writes now: it was
// not fenced, and a Leased master holds its lease.
func (m *Master) Acknowledges() bool {
	return m.fenced.Load() == 0 && m.LeaseHeld(time.Now())
}

// confirmLeased moves the Replicated watermark of a Leased master to what
// its own log confirmed, if it holds its lease after that was read: so
// every write it acknowledges was confirmed by a master that held the
// lease then.
func (m *Master) confirmLeased() {
	if m.fenced.Load() != 0 {
		return
	}
	off := m.cfg.Store.Offset(m.cfg.Store.LocalStage())
	if !m.LeaseHeld(time.Now()) {
		if m.leaseUntil.Load() != nil && m.leaseLost.CompareAndSwap(false, true) {
			m.log.Warn("replication: the lease from the controllers ended: this master acknowledges nothing until it is renewed",
				"epoch", m.Epoch(), "confirmed", m.cfg.Store.Offset(store.Confirmed), "written", m.cfg.Store.Offset(store.Written))
		}
		return
	}
	m.cfg.Store.AdvanceReplicated(off)
}

// Serve accepts replicas on ln until ctx ends, then closes ln and every
// replica connection and returns once they are gone.
func (m *Master) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { <-ctx.Done(); ln.Close() }()
	m.wg.Add(1)
	go m.watch(ctx)
	var err error
	for {
		c, aerr := ln.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("replication: accept: %w", aerr)
			}
			break
		}
		select {
		case m.pendingAuth <- struct{}{}:
		default:
			m.refused.warn("replication: refused a connection: too many connections are authenticating", "remote", c.RemoteAddr().String(),
				"max", maxPendingAuth)
			c.Close()
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.serveConn(ctx, c)
		}()
	}
	cancel()
	m.wg.Wait()
	return err
}

// watch recomputes the replicated point as the log grows (a SYNC_MASTER
// with MinInSyncReplicas of 1 and no replica confirms alone) and drops
// in-sync replicas that stopped acknowledging.
func (m *Master) watch(ctx context.Context) {
	defer m.wg.Done()
	if m.cfg.Leased {
		m.watchLeased(ctx)
		return
	}
	if !m.cfg.Sync {
		return
	}
	st := m.cfg.Store
	every := min(m.cfg.HeartbeatInterval, 50*time.Millisecond)
	for {
		// Woken by every write (so that a master confirming alone, or
		// with replicas already past it, does not hold a put until the
		// next tick), and at least every tick to expire replicas, unless
		// it is idle: every in-sync replica holds all that was written
		// and that is confirmed, so neither an expiry nor a new point can
		// come before the next write (an ack, a join and a leave
		// recompute themselves).
		w := st.Offset(store.Written)
		m.mu.Lock()
		idle := m.caughtUpLocked(w) && st.Offset(store.Replicated) >= w
		m.mu.Unlock()
		timeout := every
		if idle {
			timeout = 0
		}
		if !m.sleep(ctx, store.Written, w, timeout, every, idle) {
			return
		}
		m.mu.Lock()
		m.expireLocked(time.Now(), w)
		m.recomputeLocked()
		m.mu.Unlock()
	}
}

// sleep waits until mark passes off, at most timeout (0: no limit; a
// failed or closed store is waited out for every instead), and reports
// false once ctx ends. While an idle wait lasts, sleeping holds its
// timeout (tests see that an idle master sleeps).
func (m *Master) sleep(ctx context.Context, mark store.Watermark, off int64, timeout, every time.Duration, idle bool) bool {
	if idle {
		m.sleeping.Store(int64(timeout))
		defer m.sleeping.Store(-1)
	}
	if err := m.cfg.Store.WaitFor(ctx, mark, off+1, timeout); ctx.Err() != nil {
		return false
	} else if err != nil && !isTimeout(err) {
		select { // the store failed or closed: keep expiring on the tick
		case <-ctx.Done():
			return false
		case <-time.After(every):
		}
	}
	return true
}

// caughtUpLocked reports whether every in-sync replica acknowledged off.
func (m *Master) caughtUpLocked(off int64) bool {
	for f := range m.replicas {
		if f.inSync && f.acked.Load() < off {
			return false
		}
	}
	return true
}

// watchLeased confirms a Leased master's writes as its own log confirms
// them (woken by each), while its lease holds; at least every 10 ms, so a
// renewed lease confirms what waited. It also expires in-sync replicas.
// Idle (everything confirmed, every in-sync replica holding all that was
// written) it sleeps until the next write or the end of its lease, whose
// passing it logs.
func (m *Master) watchLeased(ctx context.Context) {
	st := m.cfg.Store
	stage := st.LocalStage()
	const every = 10 * time.Millisecond
	written := st.Offset(store.Written)
	for {
		m.confirmLeased()
		// The in-sync set (the controller's candidates) loses a replica
		// that stopped acknowledging, as a SYNC_MASTER's does; held
		// since the last round is what was written before its wait.
		m.mu.Lock()
		m.expireLocked(time.Now(), written)
		written = st.Offset(store.Written)
		idle := m.caughtUpLocked(written)
		m.mu.Unlock()
		w := st.Offset(stage)
		timeout := every
		if idle = idle && st.Offset(store.Replicated) >= w; idle {
			timeout = 0
			if u := m.leaseUntil.Load(); u != nil {
				if left := time.Until(*u); left > 0 {
					timeout = left + time.Millisecond
				}
			}
		}
		if !m.sleep(ctx, stage, w, timeout, every, idle) {
			return
		}
	}
}

// expireLocked removes from the in-sync set a replica that has bytes to
// acknowledge and acknowledged none for AckTimeout. held is what was
// written when the caller's round began (before it waited): a replica that
// acknowledged it held everything until then, so its time without
// progress starts now; after a pause with nothing written, that is the
// write that ended it.
func (m *Master) expireLocked(now time.Time, held int64) {
	if m.cfg.AckTimeout <= 0 {
		return
	}
	written := m.cfg.Store.Offset(store.Written)
	for f := range m.replicas {
		if !f.inSync {
			continue
		}
		if f.acked.Load() >= held {
			f.progress = now
			continue
		}
		if now.Sub(f.progress) > m.cfg.AckTimeout {
			f.inSync = false
			m.inSync.Add(-1)
			m.log.Warn("replication: replica left the in-sync set: no acknowledgement", "replica", f.id,
				"acked", f.acked.Load(), "written", written, "for", now.Sub(f.progress).Round(time.Millisecond))
		}
	}
}

// recomputeLocked moves the store's Replicated watermark to what every
// in-sync replica holds, if enough copies are in sync.
func (m *Master) recomputeLocked() {
	if !m.cfg.Sync || m.fenced.Load() != 0 {
		return
	}
	if 1+int(m.inSync.Load()) < m.cfg.MinInSyncReplicas {
		return
	}
	point := m.cfg.Store.Offset(store.Written)
	for f := range m.replicas {
		a := f.acked.Load()
		m.acks[f.id] = max(m.acks[f.id], a)
		if f.inSync {
			point = min(point, a)
		}
	}
	for _, id := range m.required {
		// A required replica out of the in-sync set (or gone) holds
		// what it last acknowledged, nothing more.
		if !m.inSyncLocked(id) {
			point = min(point, m.acks[id])
		}
	}
	m.cfg.Store.AdvanceReplicated(point)
}

func (m *Master) reject(c net.Conn, code byte, reason string) {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(appendFrame(nil, typeReject, encodeReject(code, reason)))
}

// serveConn runs one replica connection: the handshake, then a sender
// (this goroutine) and an ack reader.
func (m *Master) serveConn(ctx context.Context, raw net.Conn) {
	defer raw.Close()
	stop := context.AfterFunc(ctx, func() { raw.Close() }) // a stop does not wait out a handshake
	defer stop()
	c, r, err := m.admit(raw) // auth.go
	<-m.pendingAuth
	if err != nil {
		return
	}
	defer c.Close()
	idle := time.Duration(idleTimeoutHeartbeats) * m.cfg.HeartbeatInterval
	c.SetReadDeadline(time.Now().Add(idle))
	typ, p, _, err := readFrame(r, 1<<20, nil)
	if err == nil && typ == typeAuth {
		m.reject(c, rejectAuth, "this master has no haAuthSecret and the replica sends one: set the same haAuthSecret on the master and its slaves")
		m.refused.warn("replication: refused a replica that authenticates with a secret: this master has no haAuthSecret", "remote", c.RemoteAddr().String())
		return
	}
	if err != nil || typ != typeHello {
		m.refused.warn("replication: replica connection without a valid hello", "remote", c.RemoteAddr().String(), "type", typ, "err", err)
		return
	}
	h, err := decodeHello(p)
	if err != nil {
		m.log.Warn("replication: bad hello", "remote", c.RemoteAddr(), "err", err)
		return
	}
	st := m.cfg.Store
	masterEnd := st.Offset(store.Written)
	switch {
	case h.Version != protocolVersion:
		m.reject(c, rejectConfig, fmt.Sprintf("protocol version %d; this master speaks %d", h.Version, protocolVersion))
		return
	case h.BrokerName != m.cfg.BrokerName:
		m.reject(c, rejectConfig, fmt.Sprintf("brokerName %q; this master is %q", h.BrokerName, m.cfg.BrokerName))
		return
	case h.BrokerID <= 0:
		m.reject(c, rejectConfig, fmt.Sprintf("brokerId %d; a slave's is above 0", h.BrokerID))
		return
	case h.SegmentBytes != st.SegmentBytes():
		m.reject(c, rejectConfig, fmt.Sprintf("mapedFileSizeCommitLog %d; the master's is %d (they must be equal)", h.SegmentBytes, st.SegmentBytes()))
		return
	}
	if cut, ok, err := m.answerDivergence(c, h, masterEnd); cut || !ok {
		if err != nil {
			m.log.Error("replication: replica diverged", "replica", h.BrokerID, "err", err)
			m.reject(c, rejectDiverged, err.Error())
		}
		return
	}
	if h.LogEnd < st.Offset(store.Written) && h.LogEnd < minOffset(st) {
		m.reject(c, rejectRetry, fmt.Sprintf("the replica's log ends at %d, before the master's oldest segment (%d): move its data directory away (an empty replica starts at the master's oldest segment)", h.LogEnd, minOffset(st)))
		return
	}
	c.SetWriteDeadline(time.Now().Add(idle))
	if _, err := c.Write(appendFrame(nil, typeHelloOK, helloOK{MasterEnd: masterEnd, Epochs: m.hist, TruncateTo: h.LogEnd}.encode())); err != nil {
		return
	}
	f := &follower{conn: c, raw: raw, id: h.BrokerID, syncFlush: h.SyncFlush, progress: time.Now()}
	f.sent.Store(h.LogEnd)
	f.acked.Store(h.LogEnd)
	f.pace.init(h.LogEnd)
	m.mu.Lock()
	m.evictLocked(f.id)
	m.replicas[f] = struct{}{}
	m.joinLocked(f)
	m.mu.Unlock()
	m.log.Info("replication: replica connected", "replica", h.BrokerID, "remote", c.RemoteAddr(), "from", h.LogEnd, "master_end", masterEnd)

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		m.readAcks(cctx, r, f, idle)
	}()
	err = m.stream(cctx, f, h.LogEnd)
	cancel()
	c.Close()
	<-done
	m.mu.Lock()
	if f.inSync {
		m.inSync.Add(-1)
	}
	delete(m.replicas, f)
	m.mu.Unlock()
	m.log.Warn("replication: replica disconnected", "replica", h.BrokerID, "acked", f.acked.Load(), "err", err)
}

// evictLocked drops the older connections of replica id (a replica that
// reconnected before the master noticed its old connection died): one
// replica is one copy, however many connections it has.
func (m *Master) evictLocked(id int64) {
	for f := range m.replicas {
		if f.id != id {
			continue
		}
		if f.inSync {
			f.inSync = false
			m.inSync.Add(-1)
		}
		f.gone = true
		delete(m.replicas, f)
		f.raw.Close() // not conn: a TLS close would write, under m.mu
		m.log.Warn("replication: replica reconnected; its older connection is closed", "replica", id)
	}
}

// checkTail compares the CRC trailer of the replica's last record with
// the master's bytes at the same place: equal epochs of two unrelated
// logs (another group's master, a data directory swapped) do not pass.
func checkTail(st *store.Store, h hello) error {
	if len(h.Tail) == 0 {
		if h.LogEnd%st.SegmentBytes() != 0 {
			return fmt.Errorf("%w: the replica sent no tail for its log end %d", ErrDiverged, h.LogEnd)
		}
		return nil
	}
	own := make([]byte, tailBytes)
	if err := st.ReadCommitLog(own, h.LogEnd-tailBytes); err != nil {
		return fmt.Errorf("%w: reading the master's bytes before offset %d: %w", ErrDiverged, h.LogEnd, err)
	}
	if !bytes.Equal(own, h.Tail) {
		return fmt.Errorf("%w: the replica's last record before offset %d has CRC %x, the master's %x", ErrDiverged, h.LogEnd, h.Tail, own)
	}
	return nil
}

func minOffset(st *store.Store) int64 { return st.Stats().MinOffset }

// joinLocked adds f to the in-sync set once it holds everything already
// confirmed (so a member never lacks an acknowledged record).
func (m *Master) joinLocked(f *follower) {
	if f.inSync || f.gone || f.acked.Load() < m.cfg.Store.Offset(store.Confirmed) {
		return
	}
	f.inSync = true
	f.progress = time.Now()
	m.inSync.Add(1)
	m.log.Info("replication: replica in sync", "replica", f.id, "acked", f.acked.Load())
}

// readAcks reads the replica's acks until the connection ends.
func (m *Master) readAcks(ctx context.Context, r *bufio.Reader, f *follower, idle time.Duration) {
	var buf []byte
	for ctx.Err() == nil {
		f.conn.SetReadDeadline(time.Now().Add(idle))
		typ, p, b, err := readFrame(r, maxReplicaFrameBytes, buf)
		buf = b
		if err != nil {
			return
		}
		if typ == typeOffsets { // offsets.go
			if err := m.onOffsets(f, p); err != nil {
				m.log.Warn("replication: bad offsets frame", "replica", f.id, "err", err)
				return
			}
			continue
		}
		if typ != typeAck {
			m.log.Warn("replication: unexpected frame from replica", "replica", f.id, "type", typ)
			return
		}
		a, err := decodeAck(p)
		if err != nil {
			m.log.Warn("replication: bad ack", "replica", f.id, "err", err)
			return
		}
		f.lastAck.Store(time.Now().UnixNano())
		f.pace.received(a.Written)
		got := a.Written
		if f.syncFlush {
			got = a.Flushed
		}
		if got > f.sent.Load() {
			m.log.Error("replication: replica acknowledged bytes it was never sent", "replica", f.id, "ack", got, "sent", f.sent.Load())
			return
		}
		if got <= f.acked.Load() {
			continue
		}
		f.acked.Store(got)
		m.mu.Lock()
		f.progress = time.Now()
		m.joinLocked(f)
		m.recomputeLocked()
		m.mu.Unlock()
		if m.cfg.Sync {
			// The sends this ack covers are answered here, in one pass,
			// rather than after the dispatcher's round in progress; the
			// point was reported under mu, so SetRequired's promise holds.
			m.cfg.Store.ReleaseReplicated()
		}
	}
}

// stream sends the log from pos on, as it grows, in ranges that never
// cross a segment or an epoch boundary; an idle link gets heartbeats.
func (m *Master) stream(ctx context.Context, f *follower, pos int64) error {
	st := m.cfg.Store
	var raw, payload, frame []byte
	idle := time.Duration(idleTimeoutHeartbeats) * m.cfg.HeartbeatInterval
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if pos >= st.Offset(store.Written) {
			err := st.WaitFor(ctx, store.Written, pos+1, m.cfg.HeartbeatInterval)
			if err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil && !isTimeout(err) {
				return err
			}
		}
		credit, err := m.waitCredit(ctx, f)
		if err == nil && credit {
			credit, err = m.waitRate(ctx, f, pos) // pacing.go
		}
		if err != nil {
			return err
		}
		if !credit {
			raw = raw[:0] // no room: a heartbeat keeps the link alive
		}
		d, next, err := m.nextData(pos, raw, !credit)
		if err != nil {
			return err
		}
		raw = d.Raw
		payload = d.appendTo(payload[:0])
		frame = appendFrame(frame[:0], typeData, payload)
		// Counted as sent before the write: the replica may acknowledge
		// the bytes before Write returns (an ack above sent ends the
		// connection); a failed write ends it anyway.
		f.sent.Store(next)
		f.pace.sent(next)
		m.charge(f, pos, next)
		f.conn.SetWriteDeadline(time.Now().Add(idle))
		if _, err := f.conn.Write(frame); err != nil {
			return err
		}
		pos = next
	}
}

// nextData returns the DATA frame for the log from pos (empty at the
// log end or if heartbeat: a heartbeat), reading into raw, and the offset
// after it.
func (m *Master) nextData(pos int64, raw []byte, heartbeat bool) (data, int64, error) {
	st := m.cfg.Store
	ep, epEnd, ok := m.hist.EpochAt(pos)
	if !ok {
		return data{}, pos, fmt.Errorf("replication: no epoch holds offset %d", pos)
	}
	limit := int64(0)
	if epEnd >= 0 {
		limit = epEnd
	}
	next := pos
	confirmed := st.Offset(store.Confirmed)
	if pos < st.Offset(store.Written) && !heartbeat {
		var err error
		raw, next, err = st.ReadReplication(pos, limit, m.cfg.ChunkBytes, raw)
		if err != nil {
			return data{}, pos, err
		}
	} else {
		raw = raw[:0]
	}
	return data{Epoch: ep.Epoch, EpochStart: ep.Start, Offset: pos, Confirmed: confirmed, Raw: raw}, next, nil
}

func isTimeout(err error) bool { return errors.Is(err, watermark.ErrTimeout) }
