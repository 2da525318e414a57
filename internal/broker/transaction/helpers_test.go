package transaction

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

var storeHost = netip.MustParseAddrPort("127.0.0.1:10911")

type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// producers is a remoting server whose connections register as producers
// of the group named in their first request's ext "group". It is the
// engine's Producers as the broker is: a check-back goes to the group's
// last registered live connection, and the checker that made that
// connection records it. (The broker's encoding of the check-back request
// is tested in internal/broker, TestCheckTransactionRequest.)
type producers struct {
	srv   *remoting.Server
	addr  string
	mu    sync.Mutex
	conns map[string][]*remoting.Conn
	owner map[*remoting.Conn]*checker // the checker at the other end
	byID  map[string]*checker         // until its connection registers
}

func newProducers(t *testing.T) *producers {
	p := &producers{conns: map[string][]*remoting.Conn{}, owner: map[*remoting.Conn]*checker{}, byID: map[string]*checker{}}
	p.srv = remoting.NewServer(remoting.ServerConfig{OnConnClose: p.drop},
		remoting.HandlerFunc(func(_ context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
			p.mu.Lock()
			g := req.Ext("group")
			p.conns[g] = append(p.conns[g], c)
			p.owner[c] = p.byID[req.Ext("id")]
			p.mu.Unlock()
			return req.NewResponse(0, "")
		}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	go p.srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.srv.Shutdown(ctx)
	})
	return p
}

func (p *producers) drop(c *remoting.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.owner, c)
	for g, cs := range p.conns {
		for i, x := range cs {
			if x == c {
				p.conns[g] = append(cs[:i:i], cs[i+1:]...)
				break
			}
		}
	}
}

// ProducerConn returns the last registered live connection of group.
func (p *producers) ProducerConn(group string) *remoting.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.conns[group]
	if len(cs) == 0 {
		return nil
	}
	return cs[len(cs)-1]
}

// liveConn returns the last registered connection of group if it is not
// closed, as the broker's ProducerConn does.
func (p *producers) liveConn(group string) *remoting.Conn {
	c := p.ProducerConn(group)
	if c == nil {
		return nil
	}
	select {
	case <-c.Done():
		return nil
	default:
		return c
	}
}

// HasProducer implements Producers.
func (p *producers) HasProducer(group string) bool { return p.liveConn(group) != nil }

// CheckTransaction implements Producers: the checker at the other end of
// the group's live connection records chk.
func (p *producers) CheckTransaction(group string, chk core.TransactionCheck) error {
	c := p.liveConn(group)
	p.mu.Lock()
	ck := p.owner[c]
	p.mu.Unlock()
	if c == nil || ck == nil {
		return fmt.Errorf("no live producer of %s", group)
	}
	ck.checks <- chk
	return nil
}

// checker is a producer client; it records the check-backs sent to it.
type checker struct {
	cl     *remoting.Client
	checks chan core.TransactionCheck
}

var checkerIDs atomic.Int64

func (p *producers) connect(t *testing.T, group string) *checker {
	t.Helper()
	ck := &checker{checks: make(chan core.TransactionCheck, 1024)}
	id := strconv.FormatInt(checkerIDs.Add(1), 10)
	p.mu.Lock()
	p.byID[id] = ck
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, p.addr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ck.cl = cl
	if _, err := cl.Invoke(ctx, remoting.NewRequest(34, map[string]string{"group": group, "id": id}, nil)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return ck
}

// next waits for the next check-back.
func (ck *checker) next(t *testing.T) core.TransactionCheck {
	t.Helper()
	select {
	case c := <-ck.checks:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no check-back received")
		return core.TransactionCheck{}
	}
}

func (ck *checker) none(t *testing.T) {
	t.Helper()
	select {
	case c := <-ck.checks:
		t.Fatalf("unexpected check %v", c)
	default:
	}
}

// env is a store and an engine on one directory.
type env struct {
	t     *testing.T
	dir   string
	fs    vfs.FS
	clk   *fakeClock
	prods *producers
	mut   func(*Config)
	async bool // ASYNC_FLUSH store
	// replicated: the store waits for replicas (a SYNC_MASTER's), whose
	// acknowledgements the test gives with ack (replicas.go test helper).
	replicated bool
	st         *store.Store
	eng        *Engine
}

func newEnv(t *testing.T, mut func(*Config)) *env {
	e := &env{t: t, dir: t.TempDir(), fs: vfs.OS{}, clk: newFakeClock(), prods: newProducers(t), mut: mut}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) storeConfig() store.Config {
	cfg := store.DefaultConfig(e.dir)
	cfg.FS = e.fs
	cfg.FlushDiskType = store.SyncFlush
	if e.async {
		cfg.FlushDiskType = store.AsyncFlush
		cfg.FlushInterval = 5 * time.Millisecond
	}
	cfg.CommitLogSegmentBytes = 4 << 20
	cfg.MaxMessageBytes = 64 << 10
	cfg.ConsumeQueueSegmentEntries = 1000
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 1024, 100000
	cfg.FlushConsumeQueueInterval = 50 * time.Millisecond
	cfg.RetentionCheckInterval = time.Hour
	cfg.FileReservedTime = 100000 * time.Hour
	cfg.Now = e.clk.Now
	if e.replicated {
		cfg.ExternalReplication = true
		cfg.ReplicationTimeout = 50 * time.Millisecond
	}
	return cfg
}

func (e *env) open() {
	e.t.Helper()
	st, err := store.Open(e.storeConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := Config{Store: st, Producers: e.prods, StoreHost: storeHost,
		Dir: e.dir, FS: e.fs, CheckInterval: time.Hour, Timeout: 6 * time.Second, CheckMax: 3, Now: e.clk.Now}
	if e.mut != nil {
		e.mut(&cfg)
	}
	eng, err := New(cfg)
	if err != nil {
		st.Close()
		e.t.Fatal(err)
	}
	e.st, e.eng = st, eng
}

func (e *env) close() {
	if e.eng == nil {
		return
	}
	if err := e.eng.Close(); err != nil {
		e.t.Errorf("engine close: %v", err)
	}
	if err := e.st.Close(); err != nil {
		e.t.Errorf("store close: %v", err)
	}
	e.eng, e.st = nil, nil
}

func (e *env) restart() {
	e.close()
	e.open()
}

// abandon drops the engine without Close (no cursor write) and closes the
// store, as after a process crash whose page cache survived.
func (e *env) abandon() {
	if err := e.st.Close(); err != nil {
		e.t.Errorf("store close: %v", err)
	}
	e.eng, e.st = nil, nil
}

var seq atomic.Int64

// prepare stores a half message for topic/queue 0 and returns it (with the
// half record's offsets).
func (e *env) prepare(topic, group, body string, extra ...string) *message.Message {
	e.t.Helper()
	uniq := fmt.Sprintf("7F0000010001%020X", seq.Add(1))
	props := map[string]string{message.PropUniqKey: uniq, message.PropProducerGroup: group,
		message.PropTransactionPrepared: "true", message.PropTags: "tagA", message.PropKeys: "k-" + body}
	for i := 0; i+1 < len(extra); i += 2 {
		props[extra[i]] = extra[i+1]
	}
	m := &message.Message{Topic: topic, QueueID: 0, SysFlag: message.FlagTxPrepared,
		BornTimestamp: e.clk.Now().UnixMilli(), BornHost: netip.MustParseAddrPort("127.0.0.1:5555"),
		StoreHost: storeHost, Body: []byte(body), Properties: message.EncodeProperties(props)}
	res := e.eng.Prepare(context.Background(), m)
	if res.Status != store.PutOK {
		e.t.Fatalf("prepare: %v %v", res.Status, res.Err)
	}
	return m
}

// END_TRANSACTION commitOrRollback values, as the tests' producers send
// them (internal/broker parses them; its tests cover the parsing).
const (
	decisionNone     = 0
	decisionCommit   = 8
	decisionRollback = 12
)

// endTxn is END_TRANSACTION's decision for the half at (qoff, phys), as
// the broker hands it to the engine.
func endTxn(group string, qoff, phys int64, decision int) core.EndTransaction {
	return core.EndTransaction{ProducerGroup: group, QueueOffset: qoff, CommitLogOffset: phys, Commit: decision == decisionCommit}
}

// end sends END_TRANSACTION for the half m and returns the response code
// (-1: no response).
func (e *env) end(m *message.Message, group string, decision int) int16 {
	e.t.Helper()
	return e.endAt(group, m.QueueOffset, m.PhysOffset, decision)
}

// endAt decides as END_TRANSACTION with commitOrRollback = decision
// would and returns the response code the producer gets: -1 (no response)
// for UNKNOWN, which the broker does not pass on; SYSTEM_ERROR when the
// engine refuses; otherwise the code of the engine's put status.
func (e *env) endAt(group string, qoff, phys int64, decision int) int16 {
	e.t.Helper()
	switch decision {
	case decisionNone:
		return -1
	case decisionCommit, decisionRollback:
	default:
		e.t.Fatalf("commitOrRollback %d never reaches the engine", decision)
	}
	status, remark, err := e.eng.End(context.Background(), endTxn(group, qoff, phys, decision))
	if err != nil {
		if !errors.Is(err, core.ErrInternal) {
			e.t.Fatalf("END refused with %v, not a core.ErrInternal", err)
		}
		e.t.Logf("END refused: %v", err)
		return remoting.ResSystemError
	}
	code := putStatusCode(status)
	if code != 0 {
		e.t.Logf("END response %d %s", code, remark)
	}
	return code
}

// putStatusCode is the broker's mapping of put statuses to response codes
// (internal/broker/errors.go), for the codes these tests expect.
func putStatusCode(s store.PutStatus) int16 {
	switch s {
	case store.PutOK:
		return remoting.ResSuccess
	case store.PutFlushDiskTimeout:
		return remoting.ResFlushDiskTimeout
	default:
		return -2 // a failed write
	}
}

// records returns the decoded records of topic/queue, waiting until the
// store confirmed everything written.
func (e *env) records(topic string, queueID int32) []*message.Message {
	e.t.Helper()
	e.waitConfirmed()
	var out []*message.Message
	off := e.st.MinOffset(topic, queueID)
	for off < e.st.MaxOffset(topic, queueID) {
		r, err := e.st.GetMessage(topic, queueID, off, 64, 1<<20, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, rec := range r.Records {
			m, err := message.Decode(append([]byte(nil), rec...))
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, m)
		}
		off = r.NextOffset
		r.Release()
	}
	return out
}

func (e *env) waitConfirmed() {
	e.t.Helper()
	w := e.st.Stats().WrittenOffset
	deadline := time.Now().Add(10 * time.Second)
	for e.st.VisibleOffset() < w {
		if time.Now().After(deadline) {
			e.t.Fatalf("store did not confirm offset %d", w)
		}
		time.Sleep(time.Millisecond)
	}
}

func prop(m *message.Message, k string) string {
	v, _ := message.Property(m.Properties, k)
	return v
}

func (p *producers) count(group string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns[group])
}

func openStoreOnly(e *env) (*store.Store, error) { return store.Open(e.storeConfig()) }
