package replication

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// SlaveConfig configures a Slave.
type SlaveConfig struct {
	Store      *store.Store // opened with store.Config.Replica
	FS         vfs.FS       // nil = vfs.OS{}
	DataDir    string       // the epoch file lives under it (EpochFile)
	BrokerName string
	BrokerID   int64
	// MasterAddr is the master's HA address, host:port; empty: the slave
	// waits for SetMasterAddr (the NameServer's answer to its
	// registration).
	MasterAddr string
	// SyncFlush: acknowledge flushed bytes (after this replica's
	// fdatasync), else written ones.
	SyncFlush         bool
	HeartbeatInterval time.Duration // the master's; 0 = DefaultHeartbeatInterval
	MaxFrameBytes     int           // 0 = DefaultMaxFrameBytes
	RetryInterval     time.Duration // between connection attempts; 0 = 200 ms
	// OnLinkLost, if set, is called (without locks, it must not block)
	// when a connection to the master fails or ends: a slave that learns
	// its master's address from the NameServer asks for a registration
	// then, so a master that moved is found at once.
	OnLinkLost func()
	// LocalOffsets, if set, returns the consumer offsets committed on this
	// replica that the master has not confirmed; they are sent at the
	// start of every session (offsets.go).
	LocalOffsets func() []OffsetReport
	// Secret, if set, is the group's shared secret: the replica proves it
	// knows it and refuses a master that cannot (auth.go).
	Secret []byte
	// TLS, if set, is the client configuration of a TLS link to the
	// master (auth.go); nil: plain TCP.
	TLS *tls.Config
	// AuthTimeout bounds the TLS handshake and authentication (0 =
	// DefaultAuthTimeout).
	AuthTimeout time.Duration
	// FencedEpoch is the epoch this replica promised (a controller's
	// fence) before it started: it follows no master of a lower epoch.
	// Fence raises it.
	FencedEpoch uint32
	// TruncateShown: a member of an ASYNC_MASTER group in controller
	// mode, which may hold records it acknowledged as master that no
	// replica got. When the new master's truncation point is below what
	// this replica showed, Run returns a *ShownTruncation instead of
	// stopping on ErrDiverged: the caller closes the store, cuts it
	// (store.TruncateClosed) and follows again. Those records are lost.
	TruncateShown bool
	Logger        *slog.Logger
}

// ErrTruncateShown: a replica must take back records it showed (see
// SlaveConfig.TruncateShown).
var ErrTruncateShown = errors.New("replication: the new master's log does not hold records this replica showed")

// ShownTruncation is what Run returns with TruncateShown: the log must be
// cut at Offset, losing LogEnd-Offset bytes, Records records, that this
// replica showed (or acknowledged as master) and the group's master does
// not hold.
type ShownTruncation struct {
	Offset, LogEnd int64
	Records        int
}

func (e *ShownTruncation) Error() string {
	return fmt.Sprintf("replication: the master's log agrees with this replica's up to offset %d only: %d records (%d bytes) this replica showed are not in the group's log and must be cut",
		e.Offset, e.Records, e.LogEnd-e.Offset)
}

func (e *ShownTruncation) Unwrap() error { return ErrTruncateShown }

// Slave copies its master's CommitLog into its store: it connects, says
// what it has (log end, epoch history), checks every range it receives
// and appends it at its log end, and acknowledges what it wrote and
// flushed. It reconnects after any connection failure; a log that
// diverged from the master's stops it (Run returns ErrDiverged).
type Slave struct {
	cfg  SlaveConfig
	log  *slog.Logger
	path string

	mu   sync.Mutex
	hist History

	truncations atomic.Int64 // truncations of the log to the master's (truncate.go)
	master      masterAddr   // masteraddr.go
	link        link         // what State reports of the connection (status.go)
	diskFull    atomic.Bool  // not following: the store's disk is full (space.go)

	refused refusals // log lines about failed authentication (auth.go)

	// fenceMu is held while a DATA frame is checked and applied, so that
	// once Fence returns nothing of a master below the fence is written.
	fenceMu   sync.Mutex
	fenced    uint32   // the promised epoch: no master below it is followed
	sessEpoch uint32   // the epoch of the master of the current session (0: none)
	sessConn  net.Conn // the current session's connection (nil: none)

	offsMu   sync.Mutex
	offsSent map[OffsetReport]bool // what this session reported (offsets.go)
}

// NewSlave loads the replica's epoch history.
func NewSlave(cfg SlaveConfig) (*Slave, error) {
	if cfg.FS == nil {
		cfg.FS = vfs.OS{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler) // injected, never the global one
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 200 * time.Millisecond
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
	// Epochs past the log end hold no bytes (a truncation cut them before
	// the history was saved, or a crash lost bytes recorded ahead).
	if t := trimHistory(h, cfg.Store.Offset(store.Written)); len(t) != len(h) {
		if err := SaveHistory(cfg.FS, path, t); err != nil {
			return nil, err
		}
		h = t
	}
	s := &Slave{cfg: cfg, log: cfg.Logger, path: path, hist: h, refused: refusals{log: cfg.Logger}, fenced: cfg.FencedEpoch}
	s.master.addr = cfg.MasterAddr
	return s, nil
}

// History returns the replica's epoch history.
func (s *Slave) History() History {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(History(nil), s.hist...)
}

// errRejected is a master's refusal.
var errRejected = errors.New("replication: the master refused this replica")

// Run replicates until ctx ends (nil) or the replica cannot go on: its log
// diverged from the master's (ErrDiverged), its store failed, or the
// epoch history could not be saved.
func (s *Slave) Run(ctx context.Context) error {
	for {
		err := s.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var shown *ShownTruncation
		if errors.As(err, &shown) {
			s.log.Error("replication: stopped: the log must be cut below what this replica showed (records acknowledged before a failover of an ASYNC_MASTER group)",
				"offset", shown.Offset, "log_end", shown.LogEnd, "records", shown.Records)
			return shown
		}
		if errors.Is(err, ErrDiverged) || errors.Is(err, errFatal) {
			s.log.Error("replication: stopped", "err", err)
			return err
		}
		if errors.Is(err, errTruncated) {
			continue // reconnect at once from the new log end
		}
		if errors.Is(err, errMasterChanged) {
			continue
		}
		retry := s.cfg.RetryInterval
		if errors.Is(err, ErrFencedMaster) {
			s.log.Warn("replication: session closed: the master's epoch is below the one this replica promised; waiting for the new master",
				"master", s.MasterAddr(), "err", err)
			if s.cfg.OnLinkLost != nil {
				s.cfg.OnLinkLost()
			}
		} else if errors.Is(err, store.ErrDiskFull) {
			s.waitForSpace(err) // space.go
		} else if errors.Is(err, ErrAuth) {
			// Not a transient fault: the configurations differ, or the
			// peer is not this group's master. Dial again more slowly.
			retry = max(retry, authRetryInterval)
			s.refused.warn("replication: not following the master: authentication failed; retrying", "master", s.MasterAddr(),
				"retry_in", retry, "err", err)
			if s.cfg.OnLinkLost != nil {
				s.cfg.OnLinkLost()
			}
		} else {
			s.log.Warn("replication: link to master lost; reconnecting", "master", s.MasterAddr(), "err", err)
			if s.cfg.OnLinkLost != nil {
				s.cfg.OnLinkLost()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

// errFatal marks errors after which replication must not continue.
var errFatal = errors.New("replication: replica cannot continue")

func (s *Slave) session(ctx context.Context) error {
	st := s.cfg.Store
	if err := st.Err(); err != nil {
		return fmt.Errorf("%w: store: %w", errFatal, err)
	}
	if err := st.ReplicaSpace(); err != nil {
		return err // not in sync while full: the master must not wait for it
	}
	s.spaceBack()
	addr, sctx, cancel, err := s.sessionAddr(ctx) // masteraddr.go
	if err != nil {
		return err
	}
	defer cancel()
	idle := time.Duration(idleTimeoutHeartbeats) * s.cfg.HeartbeatInterval
	d := net.Dialer{Timeout: idle}
	c, err := d.DialContext(sctx, "tcp", addr)
	if err != nil {
		return s.sessionErr(ctx, sctx, err)
	}
	defer c.Close()
	stop := context.AfterFunc(sctx, func() { c.Close() })
	defer stop()
	sc, r, err := s.secure(c) // auth.go
	if err == nil {
		err = s.follow(sc, r, addr)
	}
	return s.sessionErr(ctx, sctx, err)
}

// follow runs one connection to the master at addr, past its protections
// (secure), read through r.
func (s *Slave) follow(c net.Conn, r *bufio.Reader, addr string) error {
	idle := time.Duration(idleTimeoutHeartbeats) * s.cfg.HeartbeatInterval

	h, err := s.makeHello()
	if err != nil {
		return err
	}
	end := h.LogEnd
	c.SetWriteDeadline(time.Now().Add(idle))
	if _, err := c.Write(appendFrame(nil, typeHello, h.encode())); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(idle))
	typ, p, buf, err := readFrame(r, s.cfg.MaxFrameBytes, nil)
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("the master closed the connection before answering HELLO (does it require haAuthSecret, or TLS, that this replica lacks?): %w", err)
	}
	if err != nil {
		return err
	}
	switch typ {
	case typeReject:
		code, reason, err := decodeReject(p)
		switch {
		case err != nil:
			return err
		case code == rejectDiverged:
			return fmt.Errorf("%w (the master says: %s)", ErrDiverged, reason)
		case code == rejectConfig:
			return fmt.Errorf("%w: %w: %s", errFatal, errRejected, reason)
		case code == rejectAuth:
			return fmt.Errorf("%w: the master refused: %s", ErrAuth, reason)
		}
		return fmt.Errorf("%w: %s", errRejected, reason)
	case typeHelloOK:
	default:
		return fmt.Errorf("%w: frame type %d before the master's answer", ErrMalformed, typ)
	}
	ok, err := decodeHelloOK(p)
	if err != nil {
		return err
	}
	if err := s.beginSession(c, ok.Epochs.Last().Epoch); err != nil {
		return err
	}
	defer s.endSession()
	if err := s.accept(h, ok); err != nil {
		return err
	}
	s.log.Info("replication: following master", "master", addr, "from", end, "master_end", ok.MasterEnd,
		"master_epoch", ok.Epochs.Last().Epoch)
	s.link.up()
	defer s.link.down()
	if err := s.sendOffsets(c, idle); err != nil { // offsets.go
		return err
	}

	acks := newAcker(s, c, idle)
	defer acks.stop()
	for {
		c.SetReadDeadline(time.Now().Add(idle))
		typ, p, buf, err = readFrame(r, s.cfg.MaxFrameBytes, buf)
		if err != nil {
			return err
		}
		if typ != typeData {
			return fmt.Errorf("%w: frame type %d while streaming", ErrMalformed, typ)
		}
		m, err := decodeData(p)
		if err != nil {
			return err
		}
		s.link.heard(m.Confirmed)
		if err := acks.failed(); err != nil {
			return err
		}
		next, err := s.applyFenced(m, end)
		if err != nil {
			return err
		}
		if next == end {
			// A heartbeat is answered, so that the master does not take
			// an idle link for a dead one.
			acks.heartbeat()
			continue
		}
		end = next
		acks.wrote(end)
	}
}

// ErrFencedMaster: the master's epoch is below the epoch this replica
// promised; the session is closed and nothing of it is written.
var ErrFencedMaster = errors.New("replication: the master was fenced")

// Fence makes the replica refuse, from now on, every master below epoch:
// a session with one is closed at once, and no frame of it is applied
// after Fence returns (a range being applied finishes first).
func (s *Slave) Fence(epoch uint32) {
	s.fenceMu.Lock()
	defer s.fenceMu.Unlock()
	if epoch <= s.fenced {
		return
	}
	s.fenced = epoch
	if s.sessConn != nil && s.sessEpoch < epoch {
		s.log.Warn("replication: fenced: closing the session with the master of an older epoch", "master_epoch", s.sessEpoch, "promised", epoch)
		s.sessConn.Close()
	}
}

// FencedEpoch is the epoch promised (no master below it is followed).
func (s *Slave) FencedEpoch() uint32 {
	s.fenceMu.Lock()
	defer s.fenceMu.Unlock()
	return s.fenced
}

func (s *Slave) beginSession(c net.Conn, masterEpoch uint32) error {
	s.fenceMu.Lock()
	defer s.fenceMu.Unlock()
	if masterEpoch < s.fenced {
		return fmt.Errorf("%w: its epoch is %d, this replica promised %d", ErrFencedMaster, masterEpoch, s.fenced)
	}
	s.sessEpoch, s.sessConn = masterEpoch, c
	return nil
}

func (s *Slave) endSession() {
	s.fenceMu.Lock()
	s.sessEpoch, s.sessConn = 0, nil
	s.fenceMu.Unlock()
}

// applyFenced applies a DATA frame unless the session's master is below
// the promised epoch.
func (s *Slave) applyFenced(m data, end int64) (int64, error) {
	s.fenceMu.Lock()
	defer s.fenceMu.Unlock()
	if s.sessEpoch < s.fenced {
		return end, fmt.Errorf("%w: DATA from a master at epoch %d, this replica promised %d", ErrFencedMaster, s.sessEpoch, s.fenced)
	}
	return s.apply(m, end)
}

// makeHello states what the replica's log holds.
func (s *Slave) makeHello() (hello, error) {
	st := s.cfg.Store
	end := st.Offset(store.Written)
	h := hello{Version: protocolVersion, BrokerName: s.cfg.BrokerName, BrokerID: s.cfg.BrokerID,
		SegmentBytes: st.SegmentBytes(), LogEnd: end, SyncFlush: s.cfg.SyncFlush, Epochs: s.History(), Empty: st.Empty()}
	if end%st.SegmentBytes() != 0 && !h.Empty {
		h.Tail = make([]byte, tailBytes)
		if err := st.ReadCommitLog(h.Tail, end-tailBytes); err != nil {
			return h, fmt.Errorf("%w: read the log's last CRC: %w", errFatal, err)
		}
	}
	return h, nil
}

// accept handles the master's answer to h: a truncation point below the
// log end is applied (errTruncated: reconnect); otherwise the replica's
// log must be a prefix of the master's.
func (s *Slave) accept(h hello, ok helloOK) error {
	if h.Empty {
		return s.acceptEmpty(h, ok) // logstart.go
	}
	if ok.TruncateTo < h.LogEnd {
		if err := s.truncateTo(ok.TruncateTo, ok.Tail); err != nil {
			return err
		}
		return errTruncated
	}
	// The master checked; check again on this side, where a wrong answer
	// costs data.
	return CheckDivergence(h.Epochs, h.LogEnd, ok.Epochs, ok.MasterEnd)
}

// apply takes one DATA frame for a log ending at end and returns the new
// end: the master's confirmed offset moves what this replica may show,
// and a range is appended at exactly end after its epoch is recorded.
func (s *Slave) apply(m data, end int64) (int64, error) {
	st := s.cfg.Store
	// What the master confirmed is what this replica may show.
	st.AdvanceReplicated(m.Confirmed)
	if len(m.Raw) == 0 {
		return end, nil
	}
	if m.Offset != end {
		return end, fmt.Errorf("%w: data at %d, the replica's log ends at %d", ErrMalformed, m.Offset, end)
	}
	if err := s.enterEpoch(m); err != nil {
		return end, err
	}
	next, err := st.AppendReplicated(m.Offset, m.Raw)
	if err != nil {
		if errors.Is(err, store.ErrCorrupt) {
			return end, err // a bad range: reconnect and ask again
		}
		if errors.Is(err, store.ErrDiskFull) {
			// Refused before a byte was written: this replica leaves the
			// master (the connection ends, so it is out of the in-sync set
			// at once and a SYNC_MASTER refuses sends instead of waiting)
			// and follows again once there is room.
			return end, err
		}
		if errors.Is(err, store.ErrNoSpace) {
			// Nothing of the range was kept: try again once there is
			// room (the master drops this replica from the in-sync set
			// meanwhile).
			return end, err
		}
		return end, fmt.Errorf("%w: append at %d: %w", errFatal, m.Offset, err)
	}
	return next, nil
}

// enterEpoch records the epoch of a range before its bytes are written, if
// it is new to this replica: the history must say whose bytes the log
// holds before it holds them. A failed save is fatal.
func (s *Slave) enterEpoch(m data) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.hist.Last()
	if len(s.hist) > 0 && last.Epoch == m.Epoch {
		if last.Start != m.EpochStart {
			return fmt.Errorf("%w: epoch %d starts at %d here, at %d on the master", ErrDiverged, m.Epoch, last.Start, m.EpochStart)
		}
		return nil
	}
	if len(s.hist) > 0 && (m.Epoch < last.Epoch || m.EpochStart < last.Start) {
		return fmt.Errorf("%w: data of epoch %d (from %d) after epoch %d (from %d)", ErrDiverged, m.Epoch, m.EpochStart, last.Epoch, last.Start)
	}
	h := append(append(History(nil), s.hist...), Epoch{Epoch: m.Epoch, Start: m.EpochStart})
	if err := SaveHistory(s.cfg.FS, s.path, h); err != nil {
		return fmt.Errorf("%w: %w", errFatal, err)
	}
	s.hist = h
	return nil
}

// acker sends the replica's acks from a goroutine of its own, so that
// receiving the next range overlaps this replica's fdatasync.
type acker struct {
	s    *Slave
	c    net.Conn
	idle time.Duration
	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	end   int64
	err   error
	force bool // send an ack even if it says nothing new (a heartbeat's answer)
}

func newAcker(s *Slave, c net.Conn, idle time.Duration) *acker {
	a := &acker{s: s, c: c, idle: idle, kick: make(chan struct{}, 1), done: make(chan struct{})}
	a.wg.Add(1)
	go a.run()
	return a
}

func (a *acker) wrote(end int64) {
	a.mu.Lock()
	a.end = end
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// heartbeat asks for an ack although nothing new was written: an idle
// master hears from this replica within its idle timeout.
func (a *acker) heartbeat() {
	a.mu.Lock()
	a.force = true
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *acker) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

func (a *acker) stop() {
	close(a.done)
	a.wg.Wait()
}

func (a *acker) run() {
	defer a.wg.Done()
	st := a.s.cfg.Store
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-a.done; cancel() }()
	sent := ack{Written: -1, Flushed: -1}
	offsTick := time.NewTicker(offsetsResendInterval) // offsets.go
	defer offsTick.Stop()
	for {
		select {
		case <-a.done:
			return
		case <-offsTick.C:
			if err := a.s.resendOffsets(a.c, a.idle); err != nil {
				a.setErr(err)
				a.c.Close()
				return
			}
			continue
		case <-a.kick:
		}
		a.mu.Lock()
		end, force := a.end, a.force
		a.force = false
		a.mu.Unlock()
		if a.s.cfg.SyncFlush {
			if err := st.WaitFor(ctx, store.Flushed, end, 0); err != nil {
				if ctx.Err() != nil {
					return
				}
				a.setErr(fmt.Errorf("%w: flush: %w", errFatal, err))
				return
			}
		}
		cur := ack{Written: st.Offset(store.Written), Flushed: st.Offset(store.Flushed)}
		cur.Flushed = min(cur.Flushed, cur.Written)
		if cur == sent && !force {
			continue
		}
		a.c.SetWriteDeadline(time.Now().Add(a.idle))
		if _, err := a.c.Write(appendFrame(nil, typeAck, cur.encode())); err != nil {
			a.setErr(err)
			a.c.Close()
			return
		}
		sent = cur
	}
}

func (a *acker) setErr(err error) {
	a.mu.Lock()
	if a.err == nil {
		a.err = err
	}
	a.mu.Unlock()
}
