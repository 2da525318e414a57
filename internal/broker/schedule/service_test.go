package schedule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// env is a store and a service on one directory with a manual clock.
type env struct {
	t      *testing.T
	async  bool                     // ASYNC_FLUSH store
	wrap   func(*store.Store) Store // what the service sees of the store; nil = the store
	fs     vfs.FS
	dir    string
	clk    *fakeClock
	levels []time.Duration
	st     *store.Store
	svc    *Service
	cancel context.CancelFunc
	runErr chan error
}

func newEnv(t *testing.T, levels []time.Duration) *env {
	e := &env{t: t, fs: vfs.OS{}, dir: t.TempDir(), clk: newFakeClock(t0), levels: levels}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *env) storeConfig() store.Config {
	cfg := store.DefaultConfig(e.dir)
	cfg.FS = e.fs
	cfg.FlushDiskType = store.SyncFlush
	if e.async {
		cfg.FlushDiskType = store.AsyncFlush
	}
	cfg.CommitLogSegmentBytes = 1 << 20
	cfg.ConsumeQueueSegmentEntries = 1000
	cfg.MaxMessageBytes = 64 << 10
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 64, 10000
	cfg.FlushInterval = 10 * time.Millisecond
	cfg.FlushConsumeQueueInterval = 50 * time.Millisecond
	cfg.RetentionCheckInterval = time.Hour
	cfg.FileReservedTime = 100000 * time.Hour
	cfg.Now = e.clk.Now
	cfg.TagsCode = StoreTagsCode(e.levels)
	return cfg
}

func (e *env) start() {
	e.t.Helper()
	st, err := store.Open(e.storeConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	var ss Store = st
	if e.wrap != nil {
		ss = e.wrap(st)
	}
	svc, err := New(Config{Dir: e.dir, FS: e.fs, DelayLevels: e.levels, Clock: e.clk}, ss)
	if err != nil {
		st.Close()
		e.t.Fatal(err)
	}
	st.OnVisible(svc.OnDispatch)
	ctx, cancel := context.WithCancel(context.Background())
	e.st, e.svc, e.cancel, e.runErr = st, svc, cancel, make(chan error, 1)
	go func() { e.runErr <- svc.Run(ctx) }()
}

func (e *env) stop() {
	if e.svc == nil {
		return
	}
	if err := e.svc.Close(); err != nil {
		e.t.Error(err)
	}
	if err := <-e.runErr; err != nil && !errors.Is(err, ErrClosed) {
		e.t.Error(err)
	}
	e.cancel()
	if err := e.st.Close(); err != nil {
		e.t.Error(err)
	}
	e.svc, e.st = nil, nil
}

func (e *env) restart() {
	e.stop()
	e.start()
}

// settle waits until the service is quiet: a round that began after the
// call has completed, no round is running or pending, and every entry the
// service or Schedule stored is visible to readers.
func (e *env) settle() {
	e.t.Helper()
	for i := 0; ; i++ {
		if i > 1000 {
			e.t.Fatal("service does not settle")
		}
		n := e.svc.begun.Load()
		e.svc.kick()
		waitFor(e.t, "a service round", func() bool { return e.svc.rounds.Load() > n })
		if e.quiet() {
			return
		}
	}
}

func (e *env) quiet() bool {
	if len(e.svc.wake) > 0 || e.svc.begun.Load() != e.svc.rounds.Load() {
		return false
	}
	for _, q := range e.svc.queues {
		if q.known.Load() > e.st.MaxOffset(q.key.topic, q.key.id) {
			return false
		}
	}
	return true
}

// waitCond polls cond until it holds or d passes.
func waitCond(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitVisible waits until (topic, queue) has n entries for readers.
func (e *env) waitVisible(topic string, q int32, n int64) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("%d entries in %s/%d", n, topic, q), func() bool { return e.st.MaxOffset(topic, q) >= n })
}

func newMsg(topic string, q int32, body string, props map[string]string) *message.Message {
	return &message.Message{
		Topic: topic, QueueID: q, Flag: 7, SysFlag: 0, BornTimestamp: t0.UnixMilli() - 5,
		BornHost: netip.MustParseAddrPort("10.0.0.1:5000"), StoreHost: netip.MustParseAddrPort("10.0.0.2:10911"),
		ReconsumeTimes: 2, Body: []byte(body), Properties: message.EncodeProperties(props),
	}
}

func (e *env) schedule(m *message.Message, level int32, atMs int64) {
	e.t.Helper()
	if r := e.svc.Schedule(context.Background(), m, level, atMs); r.Status != store.PutOK {
		e.t.Fatalf("Schedule: %v %v", r.Status, r.Err)
	}
	e.waitVisible(m.Topic, m.QueueID, m.QueueOffset+1)
}

// delivered reads everything in (topic, queue).
func (e *env) delivered(topic string, q int32) []*message.Message {
	e.t.Helper()
	var out []*message.Message
	for off := int64(0); off < e.st.MaxOffset(topic, q); {
		r, err := e.st.GetMessage(topic, q, off, 32, 1<<20, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, rec := range r.Records {
			m, err := message.Decode(bytes.Clone(rec))
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, m)
		}
		if r.NextOffset <= off {
			e.t.Fatalf("no progress at %d: %v", off, r.Status)
		}
		off = r.NextOffset
		r.Release()
	}
	return out
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func TestDelayLevelDeliveredOnTimeNotEarly(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second, 5 * time.Second})
	m := newMsg("orders", 3, "hello", map[string]string{
		message.PropDelayLevel: "2", message.PropTags: "TagA", message.PropKeys: "k1", message.PropUniqKey: "U1",
	})
	e.schedule(m, 2, 0)
	if m.Topic != LevelTopic || m.QueueID != 1 {
		t.Fatalf("stored in %s/%d", m.Topic, m.QueueID)
	}
	e.settle()
	e.advance(4999 * time.Millisecond)
	e.settle()
	if got := e.st.MaxOffset("orders", 3); got != 0 {
		t.Fatalf("delivered %d messages 1ms early", got)
	}
	e.advance(time.Millisecond)
	e.waitVisible("orders", 3, 1)
	out := e.delivered("orders", 3)
	if len(out) != 1 {
		t.Fatalf("delivered %d", len(out))
	}
	d := out[0]
	if string(d.Body) != "hello" || d.Flag != 7 || d.ReconsumeTimes != 2 || d.BornTimestamp != m.BornTimestamp ||
		d.BornHost != m.BornHost || d.StoreHost != m.StoreHost {
		t.Errorf("delivered message differs: %+v", d)
	}
	if d.StoreTimestamp != t0.UnixMilli()+ms(5*time.Second) {
		t.Errorf("delivered at %d, due %d", d.StoreTimestamp, t0.UnixMilli()+ms(5*time.Second))
	}
	p := message.ParseProperties(d.Properties)
	if _, ok := p[message.PropDelayLevel]; ok {
		t.Errorf("DELAY kept: %q", d.Properties)
	}
	// WAIT=false only when the store can be flushed before the cursor
	// moves; otherwise the delivery put itself waits for the sync.
	wait := ""
	if _, ok := any(e.st).(flusher); ok {
		wait = "false"
	}
	want := map[string]string{message.PropWaitStoreMsgOK: wait, message.PropRealTopic: "orders",
		message.PropRealQueueID: "3", message.PropTags: "TagA", message.PropKeys: "k1", message.PropUniqKey: "U1"}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("property %s = %q, want %q", k, p[k], v)
		}
	}
}

func TestLevelAboveMaxIsClamped(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second, 2 * time.Second})
	m := newMsg("t", 0, "b", nil)
	e.schedule(m, 9, 0)
	if m.QueueID != 1 {
		t.Fatalf("level 9 stored in queue %d", m.QueueID)
	}
	if e.svc.MaxDelayLevel() != 2 {
		t.Fatalf("MaxDelayLevel %d", e.svc.MaxDelayLevel())
	}
}

// stepUntil moves the clock from timer deadline to timer deadline (never
// past limit), settling after each step, until done reports true.
func (e *env) stepUntil(limit time.Time, done func() bool) {
	e.t.Helper()
	for i := 0; !done(); i++ {
		if i > 10000 {
			e.t.Fatal("no progress")
		}
		next, ok := e.clk.NextDeadline()
		if !ok { // a round is running: its timer is not armed yet
			e.settle()
			continue
		}
		if next.After(limit) {
			next = limit
		}
		if !next.After(e.clk.Now()) && e.clk.Now().Equal(limit) {
			// Delivered copies become visible asynchronously (the store's
			// dispatcher); give them time before calling it a failure.
			if waitCond(10*time.Second, done) {
				return
			}
			for q := int32(0); q < TimerQueues; q++ {
				e.t.Logf("timer q%d max %d cursor %d", q, e.st.MaxOffset(TimerTopic, q), e.svc.byKey[qkey{TimerTopic, q}].cursor)
			}
			e.t.Fatalf("clock reached %v and the condition does not hold", limit)
		}
		e.clk.AdvanceTo(next)
		e.settle()
	}
}

func TestTimerCascadeExactDueTime(t *testing.T) {
	e := newEnv(t, nil)
	due := t0.Add(10*time.Second + 500*time.Millisecond)
	m := newMsg("pay", 1, "timer", map[string]string{message.PropTimerDeliverMs: strconv.FormatInt(due.UnixMilli(), 10)})
	e.schedule(m, 0, due.UnixMilli())
	if m.Topic != TimerTopic || m.QueueID != 3 {
		t.Fatalf("stored in %s/%d", m.Topic, m.QueueID)
	}
	e.settle()
	early := due.Add(-time.Millisecond)
	e.stepUntil(early, func() bool { return e.clk.Now().Equal(early) })
	if n := e.st.MaxOffset("pay", 1); n != 0 {
		t.Fatalf("delivered before due")
	}
	if e.st.MaxOffset(TimerTopic, 1) != 1 {
		t.Errorf("expected one hop through queue 1 (2s), queue 1 has %d", e.st.MaxOffset(TimerTopic, 1))
	}
	e.settle()
	e.clk.AdvanceTo(due)
	e.waitVisible("pay", 1, 1)
	d := e.delivered("pay", 1)[0]
	if d.StoreTimestamp != due.UnixMilli() {
		t.Errorf("delivered at %d, due %d", d.StoreTimestamp, due.UnixMilli())
	}
	for _, k := range []string{message.PropTimerDeliverMs, message.PropTimerOutMs} {
		if _, ok := message.Property(d.Properties, k); ok {
			t.Errorf("%s kept", k)
		}
	}
}

func TestManyTimersAndLevelsNeverEarly(t *testing.T) {
	levels := []time.Duration{time.Second, 3 * time.Second, 10 * time.Second, time.Minute}
	e := newEnv(t, levels)
	type want struct {
		due  int64
		body string
	}
	wants := map[string]want{}
	delays := []time.Duration{300 * time.Millisecond, time.Second, 1500 * time.Millisecond, 7 * time.Second,
		33*time.Second + 7*time.Millisecond, 5 * time.Minute, 3*time.Hour + 1, 71 * time.Hour}
	for i, d := range delays {
		body := fmt.Sprintf("timer-%d", i)
		at := e.clk.Now().Add(d).UnixMilli()
		e.schedule(newMsg("dst", 0, body, map[string]string{message.PropTimerDeliverMs: strconv.FormatInt(at, 10)}), 0, at)
		wants[body] = want{at, body}
		e.advance(13 * time.Millisecond)
	}
	for lvl := int32(1); lvl <= 5; lvl++ {
		body := fmt.Sprintf("level-%d", lvl)
		m := newMsg("dst", 0, body, nil)
		e.schedule(m, lvl, 0)
		wants[body] = want{m.StoreTimestamp + ms(levelDelay(levels, min(lvl, 4)-1)), body}
		e.advance(7 * time.Millisecond)
	}
	limit := t0.Add(72 * time.Hour)
	e.stepUntil(limit, func() bool { return e.st.MaxOffset("dst", 0) == int64(len(wants)) })
	for _, d := range e.delivered("dst", 0) {
		w, ok := wants[string(d.Body)]
		if !ok {
			t.Fatalf("unexpected or duplicate delivery %q", d.Body)
		}
		delete(wants, string(d.Body))
		if d.StoreTimestamp < w.due || d.StoreTimestamp >= w.due+1000 {
			t.Errorf("%s: delivered at %+dms from due", w.body, d.StoreTimestamp-w.due)
		}
	}
	hops := int64(0)
	for q := int32(0); q < TimerQueues; q++ {
		hops += e.st.MaxOffset(TimerTopic, q)
	}
	t.Logf("%d timer puts for %d timers", hops, len(delays))
}

func TestRestartKeepsPendingAndDelivered(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second, 10 * time.Second})
	for i := range 3 {
		e.schedule(newMsg("r", 0, fmt.Sprintf("fast-%d", i), nil), 1, 0)
		e.schedule(newMsg("r", 0, fmt.Sprintf("slow-%d", i), nil), 2, 0)
	}
	at := t0.Add(time.Hour).UnixMilli()
	e.schedule(newMsg("r", 0, "timer", nil), 0, at)
	e.advance(time.Second)
	e.waitVisible("r", 0, 3)
	e.settle()
	e.restart()
	// The delivered ones are not delivered again; the others are still due.
	e.settle()
	if n := e.st.MaxOffset("r", 0); n != 3 {
		t.Fatalf("after restart %d delivered, want 3", n)
	}
	e.advance(8999 * time.Millisecond)
	e.settle()
	if n := e.st.MaxOffset("r", 0); n != 3 {
		t.Fatalf("slow ones early: %d", n)
	}
	e.advance(time.Millisecond)
	e.waitVisible("r", 0, 6)
	e.restart()
	e.stepUntil(time.UnixMilli(at), func() bool { return e.st.MaxOffset("r", 0) == 7 })
	out := e.delivered("r", 0)
	seen := map[string]bool{}
	for _, m := range out {
		if seen[string(m.Body)] {
			t.Errorf("%s delivered twice", m.Body)
		}
		seen[string(m.Body)] = true
	}
	if last := out[len(out)-1]; string(last.Body) != "timer" || last.StoreTimestamp != at {
		t.Errorf("timer %q delivered at %d, due %d", last.Body, last.StoreTimestamp, at)
	}
}

func TestScheduleRejects(t *testing.T) {
	e := newEnv(t, nil)
	now := e.clk.Now().UnixMilli()
	for _, tc := range []struct {
		name  string
		m     *message.Message
		level int32
		at    int64
		want  store.PutStatus
	}{
		{"nothing to schedule", newMsg("a", 0, "", nil), 0, 0, store.PutMessageIllegal},
		{"too far ahead", newMsg("a", 0, "", nil), 0, now + ms(DefaultMaxTimerDelay) + 1, store.PutMessageIllegal},
		{"schedule topic", newMsg(LevelTopic, 0, "", nil), 1, 0, store.PutMessageIllegal},
		{"negative queue", newMsg("a", -1, "", nil), 1, 0, store.PutMessageIllegal},
		{"properties too long", newMsg("a", 0, "", map[string]string{"big": string(bytes.Repeat([]byte("x"), message.MaxPropertiesBytes-10))}),
			1, 0, store.PutPropertiesTooLong},
	} {
		topic, props := tc.m.Topic, tc.m.Properties
		r := e.svc.Schedule(context.Background(), tc.m, tc.level, tc.at)
		if r.Status != tc.want || r.Err == nil {
			t.Errorf("%s: %v %v, want %v", tc.name, r.Status, r.Err, tc.want)
		}
		if tc.m.Topic != topic || tc.m.Properties != props {
			t.Errorf("%s: message not restored", tc.name)
		}
	}
	// Exactly the maximum is accepted.
	if r := e.svc.Schedule(context.Background(), newMsg("a", 0, "", nil), 0, now+ms(DefaultMaxTimerDelay)); r.Status != store.PutOK {
		t.Errorf("maximum delay: %v %v", r.Status, r.Err)
	}
}

func TestUndeliverableEntrySkipped(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second})
	// An entry put straight into a schedule queue without REAL_TOPIC.
	bad := newMsg(LevelTopic, 0, "bad", nil)
	if r := e.st.PutMessage(context.Background(), bad); r.Status != store.PutOK {
		t.Fatal(r.Err)
	}
	e.schedule(newMsg("ok", 0, "good", nil), 1, 0)
	e.advance(time.Second)
	e.waitVisible("ok", 0, 1)
}

// TestConcurrentSchedule: many producers schedule at once on an ASYNC_FLUSH
// store; everything is delivered.
func TestConcurrentSchedule(t *testing.T) {
	e := &env{t: t, fs: vfs.OS{}, dir: t.TempDir(), clk: newFakeClock(t0), levels: []time.Duration{time.Second}, async: true}
	e.start()
	t.Cleanup(e.stop)
	var wg sync.WaitGroup
	const n = 8
	errs := make(chan error, n*20)
	for g := range n {
		wg.Go(func() {
			for i := range 20 {
				m := newMsg("c", int32(g%2), fmt.Sprintf("%d-%d", g, i), nil)
				at := e.clk.Now().Add(time.Duration(1+i%3) * time.Second).UnixMilli()
				level := int32(i % 2)
				if r := e.svc.Schedule(context.Background(), m, level, at); r.Status != store.PutOK {
					errs <- r.Err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	e.stepUntil(t0.Add(time.Minute), func() bool { return e.st.MaxOffset("c", 0)+e.st.MaxOffset("c", 1) == n*20 })
}

func TestCursorFileRoundTripAndErrors(t *testing.T) {
	fs := vfs.NewMem()
	if err := ensureCursorDir(fs, "/d"); err != nil {
		t.Fatal(err)
	}
	in := map[qkey]int64{{LevelTopic, 0}: 5, {LevelTopic, 20}: 1, {TimerTopic, 17}: 9}
	if err := saveCursors(fs, "/d", in); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	out, err := loadCursors(fs, "/d")
	if err != nil || len(out) != 3 || out[qkey{TimerTopic, 17}] != 9 || out[qkey{LevelTopic, 20}] != 1 {
		t.Fatalf("after crash: %v %v", out, err)
	}
	for name, body := range map[string]string{
		"garbage":      "{",
		"version":      `{"version":2,"offsetTable":{}}`,
		"topic":        `{"version":1,"offsetTable":{"x":{"0":1}}}`,
		"queue":        `{"version":1,"offsetTable":{"KEEL_SYS_TIMER":{"18":1}}}`,
		"negative":     `{"version":1,"offsetTable":{"SCHEDULE_TOPIC_XXXX":{"0":-1}}}`,
		"queue number": `{"version":1,"offsetTable":{"SCHEDULE_TOPIC_XXXX":{"a":1}}}`,
		"level queue":  `{"version":1,"offsetTable":{"SCHEDULE_TOPIC_XXXX":{"1000":1}}}`,
	} {
		if err := vfs.WriteFileDurable(fs, "/d/config/delayOffset.json", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadCursors(fs, "/d"); !errors.Is(err, ErrBadCursorFile) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// advance settles the service (so its timer is armed) and moves the clock.
func (e *env) advance(d time.Duration) {
	e.t.Helper()
	e.settle()
	e.clk.Advance(d)
}
