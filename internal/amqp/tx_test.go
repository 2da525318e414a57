package amqp

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// depth is a queue's ready messages as queue.declare (passive) reports them.
func depth(t *testing.T, ch *amqp091.Channel, name string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

func pubTx(t *testing.T, ch *amqp091.Channel, queue, body string) {
	t.Helper()
	if err := ch.Publish("", queue, false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
}

// A transaction's publishes are held until tx.commit and then are all in
// their queues, stored as one record; tx.rollback discards them.
func TestTxCommitAndRollbackPublishes(t *testing.T) {
	b := startBroker(t)
	obs := b.channel()
	for _, q := range []string{"a", "b"} {
		if _, err := obs.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := obs.ExchangeDeclare("fan", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"a", "b"} {
		if err := obs.QueueBind(q, "", "fan", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	ch := b.channel()
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	pubTx(t, ch, "a", "a1")
	pubTx(t, ch, "a", "a2")
	pubTx(t, ch, "b", "b1")
	if err := ch.Publish("fan", "", false, false, amqp091.Publishing{Body: []byte("both")}); err != nil {
		t.Fatal(err)
	}
	// A round trip on the publishing channel: the publishes reached the
	// broker, and are held.
	if n := depth(t, ch, "a"); n != 0 {
		t.Fatalf("before commit queue a has %d messages", n)
	}
	if n := depth(t, obs, "b"); n != 0 {
		t.Fatalf("before commit queue b has %d messages", n)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if a, bb := depth(t, obs, "a"), depth(t, obs, "b"); a != 3 || bb != 2 {
		t.Fatalf("after commit: a %d b %d, want 3 and 2", a, bb)
	}
	// One record: every entry of both queues locates the same CommitLog
	// offset, so a crash keeps all of them or none.
	phys := map[int64]bool{}
	for _, name := range []string{"a", "b"} {
		q := b.srv.vhosts["/"].queue(name)
		r, err := b.st.GetMessage(q.topic, queueID, 0, 10, 0, nil)
		if err != nil || r.Status != store.Found {
			t.Fatalf("read %s: %v %v", name, r, err)
		}
		for _, rec := range r.Records {
			phys[record.Envelope(rec).PhysOffset()] = true
		}
		r.Release()
	}
	if len(phys) != 1 {
		t.Fatalf("the commit's messages are in %d records, want 1", len(phys))
	}
	want := map[string][]string{"a": {"a1", "a2", "both"}, "b": {"b1", "both"}}
	for name, bodies := range want {
		for _, body := range bodies {
			d, ok, err := obs.Get(name, true)
			if err != nil || !ok || string(d.Body) != body {
				t.Fatalf("get %s: %q %v %v, want %q", name, d.Body, ok, err, body)
			}
		}
	}

	pubTx(t, ch, "a", "gone")
	if err := ch.TxRollback(); err != nil {
		t.Fatal(err)
	}
	pubTx(t, ch, "a", "kept")
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if d, ok, _ := obs.Get("a", true); !ok || string(d.Body) != "kept" {
		t.Fatalf("after rollback and commit: %q %v, want only \"kept\"", d.Body, ok)
	}
	if n := depth(t, obs, "a"); n != 0 {
		t.Fatalf("a rolled back message is in the queue (%d left)", n)
	}
}

// Acknowledgements on a transactional channel apply at commit; a
// rollback makes them unacknowledged again (not requeued), and a channel
// closed with acks held requeues those deliveries.
func TestTxAcks(t *testing.T) {
	b := startBroker(t)
	obs := b.channel()
	if _, err := obs.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, obs, "q", "m1", "m2", "m3")
	ch := b.channel()
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	var ds []amqp091.Delivery
	for range 3 {
		d, ok, err := ch.Get("q", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		ds = append(ds, d)
	}
	if err := ds[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	q := b.srv.vhosts["/"].queue("q")
	floor := func() int64 { q.mu.Lock(); defer q.mu.Unlock(); return q.floor }
	if n := depth(t, ch, "q"); n != 0 || floor() != 0 {
		t.Fatalf("before commit: %d ready, floor %d; want 0 and 0 (the ack held)", n, floor())
	}
	if err := ch.TxRollback(); err != nil {
		t.Fatal(err)
	}
	if n := depth(t, ch, "q"); n != 0 || floor() != 0 {
		t.Fatalf("after rollback: %d ready, floor %d; want the deliveries still unacknowledged", n, floor())
	}
	// Unacknowledged again: it may be acked again, and the ack commits.
	if err := ds[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ds[1].Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if floor() != 2 {
		t.Fatalf("after commit the floor is %d, want 2", floor())
	}
	if q.savedFloor.Load() != 2 {
		t.Fatalf("commit-ok before the acks were written: saved floor %d", q.savedFloor.Load())
	}
	// An ack held when the channel closes is not applied: m3 comes back.
	if err := ds[2].Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	d, ok, err := obs.Get("q", true)
	if err != nil || !ok || string(d.Body) != "m3" || !d.Redelivered {
		t.Fatalf("after close: %q ok %v redelivered %v err %v, want m3 redelivered", d.Body, ok, d.Redelivered, err)
	}
	// Twice-acked in one transaction: 406, as without tx.
	publishConfirmed(t, obs, "q", "m4")
	ch = b.channel()
	ch.Tx()
	d, _, _ = ch.Get("q", false)
	d.Ack(false)
	if err := exception(t, ch, func(ch *amqp091.Channel) error { d.Ack(false); return ch.TxCommit() }); !isCode(err, 406) {
		t.Fatalf("a tag acked twice in a transaction: %v, want 406", err)
	}
}

// Confirms and transactions exclude each other on a channel, and commit
// and rollback need tx.select: 406 PRECONDITION_FAILED as in RabbitMQ.
func TestTxAndConfirmExclusive(t *testing.T) {
	b := startBroker(t)
	for _, tc := range []struct {
		name string
		do   func(ch *amqp091.Channel) error
	}{
		{"tx after confirm", func(ch *amqp091.Channel) error { ch.Confirm(false); return ch.Tx() }},
		{"confirm after tx", func(ch *amqp091.Channel) error { ch.Tx(); return ch.Confirm(false) }},
		{"commit without tx", func(ch *amqp091.Channel) error { return ch.TxCommit() }},
		{"rollback without tx", func(ch *amqp091.Channel) error { return ch.TxRollback() }},
	} {
		if err := exception(t, b.channel(), tc.do); !isCode(err, 406) {
			t.Errorf("%s: %v, want 406", tc.name, err)
		}
	}
}

// In a transaction, x-overflow=reject-publish is applied at commit (the
// refused messages are dropped: no confirms on a tx channel), and a
// mandatory unroutable message is returned before commit-ok.
func TestTxRejectPublishAndMandatory(t *testing.T) {
	b := startBroker(t)
	obs := b.channel()
	if _, err := obs.QueueDeclare("lim", true, false, false, false, amqp091.Table{"x-max-length": int32(2), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	ch := b.channel()
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		pubTx(t, ch, "lim", fmt.Sprint(i))
	}
	if err := ch.Publish("", "nowhere", true, false, amqp091.Publishing{Body: []byte("back")}); err != nil {
		t.Fatal(err)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-returns:
		if string(r.Body) != "back" || r.ReplyCode != 312 {
			t.Fatalf("return %q %d", r.Body, r.ReplyCode)
		}
	default:
		t.Fatal("no basic.return before tx.commit-ok")
	}
	if n := depth(t, obs, "lim"); n != 2 {
		t.Fatalf("reject-publish queue holds %d, want 2", n)
	}
	pubTx(t, ch, "lim", "more")
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if n := depth(t, obs, "lim"); n != 2 {
		t.Fatalf("reject-publish queue holds %d after a full commit, want 2", n)
	}
	obs.Get("lim", true)
	pubTx(t, ch, "lim", "room")
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if n := depth(t, obs, "lim"); n != 2 {
		t.Fatalf("reject-publish queue holds %d, want 2 (one freed, one committed)", n)
	}
}

// A crash keeps a committed transaction whole, and leaves nothing of one
// not committed; a crash racing the commit leaves all of it or none.
func TestTxCrash(t *testing.T) {
	b := startBroker(t)
	declare := func() *amqp091.Channel {
		ch := b.channel()
		for _, q := range []string{"a", "b"} {
			if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		return ch
	}
	declare()
	const n = 50
	ch := b.channel()
	ch.Tx()
	for i := range n {
		pubTx(t, ch, "a", fmt.Sprint("a", i))
		pubTx(t, ch, "b", fmt.Sprint("b", i))
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		pubTx(t, ch, "a", fmt.Sprint("uncommitted", i))
	}
	depth(t, ch, "a") // the uncommitted publishes reached the broker
	b.crash()
	b.start()
	obs := declare()
	if a, bb := depth(t, obs, "a"), depth(t, obs, "b"); a != n || bb != n {
		t.Fatalf("after a crash: a %d b %d, want %d each (the commit, nothing uncommitted)", a, bb, n)
	}
	// Purged, settled in acks.json before the next crash.
	purge := func(obs *amqp091.Channel) {
		for _, q := range []string{"a", "b"} {
			if _, err := obs.QueuePurge(q, false); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.srv.vhosts["/"].saveAcks(); err != nil {
			t.Fatal(err)
		}
	}
	purge(obs)

	for round := range 5 {
		ch := b.channel()
		ch.Tx()
		for i := range n {
			pubTx(t, ch, "a", fmt.Sprint(i))
			pubTx(t, ch, "b", fmt.Sprint(i))
		}
		depth(t, ch, "a")
		committed := make(chan error, 1)
		go func() { committed <- ch.TxCommit() }()
		var err error
		if round%2 == 1 { // after commit-ok; else racing the commit
			err = <-committed
			b.crash()
		} else {
			b.crash()
			err = <-committed
		}
		b.start()
		obs := declare()
		a, bb := depth(t, obs, "a"), depth(t, obs, "b")
		if a != bb || a != 0 && a != n || err == nil && a != n {
			t.Fatalf("round %d: commit %v, after the crash a %d b %d: want all (%d) or none, all if commit-ok came", round, err, a, bb, n)
		}
		purge(obs)
	}
}

// A transaction is bounded (record.MaxDests message-queue pairs) and
// refuses queues over Keel topics: 406, and the commit stores nothing.
func TestTxBounded(t *testing.T) {
	b := startBroker(t)
	obs := b.channel()
	if _, err := obs.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := obs.QueueDeclare("kt", true, false, false, false, amqp091.Table{ArgKeelTopic: "kt"}); err != nil {
		t.Fatal(err)
	}
	ch := b.channel()
	ch.Tx()
	err := exception(t, ch, func(ch *amqp091.Channel) error {
		for i := range record.MaxDests + 1 {
			if err := ch.Publish("", "q", false, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
				return err
			}
		}
		return ch.TxCommit()
	})
	if !isCode(err, 406) {
		t.Fatalf("a transaction of %d messages: %v, want 406", record.MaxDests+1, err)
	}
	ch = b.channel()
	ch.Tx()
	err = exception(t, ch, func(ch *amqp091.Channel) error {
		ch.Publish("", "kt", false, false, amqp091.Publishing{Body: []byte("x")})
		return ch.TxCommit()
	})
	if !isCode(err, 406) {
		t.Fatalf("a transaction publishing to a queue over a Keel topic: %v, want 406", err)
	}
	if n := depth(t, obs, "q"); n != 0 {
		t.Fatalf("a refused transaction stored %d messages", n)
	}
}

// A power loss (the store and the broker's files on a simulated disk
// that keeps only what was synced, with torn unsynced writes) before,
// during or after a commit leaves all of the transaction or none of it,
// and all of it once commit-ok was sent.
func TestTxPowerLoss(t *testing.T) {
	const n = 40
	for round := range 30 {
		mem := vfs.NewMem()
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		// The power goes just before the CommitLog's fdatasync (torn
		// unsynced writes), once armed.
		var armed atomic.Bool
		var lost *vfs.MemFS
		hooked := syncHookFS{FS: mem, hook: func(name string) {
			if strings.Contains(name, "commitlog") && armed.CompareAndSwap(true, false) {
				lost = mem.CrashCloneWith(rng)
			}
		}}
		b := &broker{t: t, dir: "/keel", fs: mem, storeCfg: func(c *store.Config) { c.FS = hooked }}
		b.start()
		ch := b.channel()
		for _, q := range []string{"a", "b"} {
			if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		ch.Tx()
		for i := range n {
			pubTx(t, ch, "a", fmt.Sprint("a", i))
			pubTx(t, ch, "b", fmt.Sprint("b", i))
		}
		depth(t, ch, "a") // the publishes reached the broker
		var err error
		switch round % 3 {
		case 0: // before the commit
			lost = mem.CrashCloneWith(rng)
			err = errors.New("the power went before the commit")
		case 1: // while its record is written, before it is synced
			armed.Store(true)
			if err := ch.TxCommit(); err != nil {
				t.Fatal(err)
			}
			if lost == nil {
				t.Fatal("no CommitLog sync for the commit")
			}
			err = errors.New("the power went before the commit's fdatasync")
		case 2: // after commit-ok
			if err := ch.TxCommit(); err != nil {
				t.Fatal(err)
			}
			lost = mem.CrashCloneWith(rng)
		}
		b.stop()
		after := &broker{t: t, dir: "/keel", fs: lost, storeCfg: func(c *store.Config) { c.FS = lost }}
		after.start()
		obs := after.channel()
		a, bb := depth(t, obs, "a"), depth(t, obs, "b")
		switch {
		case a != bb || a != 0 && a != n:
			t.Fatalf("round %d: after the power loss a %d b %d, want all (%d) or none", round, a, bb, n)
		case round%3 == 0 && a != 0:
			t.Fatalf("round %d: a transaction not committed is there after the power loss (%d)", round, a)
		case err == nil && a != n:
			t.Fatalf("round %d: commit-ok was sent, and %d of %d are there after the power loss", round, a, n)
		}
		t.Logf("round %d: %d of %d", round, a, n)
		after.stop()
	}
}

// syncHookFS calls hook with a file's name before each of its Syncs.
type syncHookFS struct {
	vfs.FS
	hook func(name string)
}

func (f syncHookFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	fl, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return syncHookFile{File: fl, hook: f.hook}, nil
}

type syncHookFile struct {
	vfs.File
	hook func(name string)
}

func (f syncHookFile) Sync() error {
	f.hook(f.Name())
	return f.File.Sync()
}

// A commit the store refuses (a full disk) closes the connection with 541
// and applies nothing: none of its messages, none of its acks (the acked
// delivery comes back).
func TestTxCommitRefusedByTheStore(t *testing.T) {
	mem := vfs.NewMem()
	b := startBrokerWith(t, func(c *store.Config) {
		c.FS = mem
		c.RetentionCheckInterval = 10 * time.Millisecond
		c.DiskReserveBytes = 0
	})
	obs := b.channel()
	if _, err := obs.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, obs, "q", "first")
	conn := b.dial()
	blocked := conn.NotifyBlocked(make(chan amqp091.Blocking, 4))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ch.Tx()
	d, ok, err := ch.Get("q", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	d.Ack(false)
	pubTx(t, ch, "q", "t1")
	pubTx(t, ch, "q", "t2")
	total, free, _ := mem.DiskUsage(b.dir)
	mem.SetCapacity((total - free) * 100 / 95) // above the hard limit: the store refuses writes
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the store did not refuse writes in 10 s")
	}
	if err := ch.TxCommit(); !isCode(err, 541) {
		t.Fatalf("commit on a full disk: %v, want 541", err)
	}
	mem.SetCapacity(vfs.DefaultMemCapacity)
	// The connection's deliveries go back once its close is done.
	waitUntil(t, "the closed connection's delivery to be back", func() bool { return depth(t, obs, "q") == 1 })
	got, ok, err := obs.Get("q", true)
	if err != nil || !ok || string(got.Body) != "first" || !got.Redelivered {
		t.Fatalf("after the refused commit: %q ok %v redelivered %v err %v, want the acked message back", got.Body, ok, got.Redelivered, err)
	}
	if n := depth(t, obs, "q"); n != 0 {
		t.Fatalf("%d messages of the refused commit are in the queue", n)
	}
}
