package amqp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/doorstats"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// broker is a store and an AMQP server on a loopback port, restartable on
// the same data directory.
type broker struct {
	t    testing.TB
	dir  string
	st   *store.Store
	srv  *Server
	addr string
	done chan error
	// ackInterval is the server's AckStateInterval (default 20 ms).
	ackInterval time.Duration
	// storeCfg, if set, changes the store's configuration.
	storeCfg func(*store.Config)
	// logs, if set, receives the server's and the store's log lines.
	logs io.Writer
	// accounts and peerAccount are the server's Config.Accounts and
	// PeerAccount.
	accounts    func() *acl.Rules
	peerAccount string
	// vhosts is the server's Config.Vhosts.
	vhosts []string
	// consumerTimeout is the server's Config.ConsumerTimeout.
	consumerTimeout time.Duration
	// fs, if set, is the server's Config.FS (its own files).
	fs vfs.FS
	// traffic and observer are the server's Config.Traffic and Observer.
	traffic  *doorstats.Counters
	observer Observer
	// maxMessage is the server's Config.MaxMessageBytes (default: what
	// the store takes in one record, as cmd/keel sets them).
	maxMessage int
	// frameBudget is the server's Config.FrameBudget.
	frameBudget FrameBudget
	// cluster and group are the server's Config.Cluster and Group.
	cluster Cluster
	group   string
	// systemRecords is the server's Config.SystemRecords.
	systemRecords bool
	// wrapListener, if set, wraps the listener the server accepts on.
	wrapListener func(net.Listener) net.Listener
}

func startBroker(t *testing.T) *broker { return startBrokerTB(t) }

func startBrokerTB(t testing.TB) *broker { return startBrokerWith(t, nil) }

// startBrokerWith starts a broker whose store configuration storeCfg
// changes (nil: the defaults).
func startBrokerWith(t testing.TB, storeCfg func(*store.Config)) *broker {
	b := &broker{t: t, dir: t.TempDir(), storeCfg: storeCfg}
	b.start()
	t.Cleanup(b.stop)
	return b
}

func (b *broker) start() {
	b.t.Helper()
	scfg := store.DefaultConfig(b.dir)
	scfg.FlushDiskType = store.SyncFlush
	scfg.CommitLogSegmentBytes = 16 << 20
	scfg.ConsumeQueueSegmentEntries = 1000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 100, 400
	scfg.PrefillBytes = -1
	logs := io.Discard
	if b.logs != nil {
		logs = b.logs
	}
	scfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	if b.storeCfg != nil {
		b.storeCfg(&scfg)
	}
	st, err := store.Open(scfg)
	if err != nil {
		b.t.Fatal(err)
	}
	if b.ackInterval == 0 {
		b.ackInterval = 20 * time.Millisecond
	}
	maxMessage := b.maxMessage
	if maxMessage == 0 {
		maxMessage = st.MaxRecordBodyBytes()
	}
	srv, err := New(Config{DataDir: b.dir, AckStateInterval: b.ackInterval, Accounts: b.accounts, PeerAccount: b.peerAccount,
		Vhosts: b.vhosts, ConsumerTimeout: b.consumerTimeout, FS: b.fs, MaxMessageBytes: maxMessage,
		Traffic: b.traffic, Observer: b.observer, FrameBudget: b.frameBudgetOrNil(), Cluster: b.cluster, Group: b.group, SystemRecords: b.systemRecords}, st, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		b.t.Fatal(err)
	}
	addr := "127.0.0.1:0"
	if b.addr != "" {
		addr = b.addr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		b.t.Fatal(err)
	}
	b.st, b.srv, b.addr, b.done = st, srv, ln.Addr().String(), make(chan error, 1)
	if b.wrapListener != nil {
		ln = b.wrapListener(ln)
	}
	go func() { b.done <- srv.Serve(ln) }()
}

func (b *broker) stop() {
	if b.srv == nil {
		return
	}
	b.srv.Close()
	<-b.done
	b.st.Close()
	b.srv, b.st = nil, nil
}

// crash stops the server as kill -9 would, as far as its own files go:
// connections cut, nothing more written (no final acknowledgement state).
func (b *broker) crash() {
	s := b.srv
	s.mu.Lock()
	s.closed = true
	for _, ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	close(s.stop)
	s.cancelBase()
	s.wg.Wait()
	<-b.done
	b.st.Close()
	b.srv, b.st = nil, nil
}

func (b *broker) restart() {
	b.stop()
	b.start()
}

func (b *broker) url() string { return fmt.Sprintf("amqp://guest:guest@%s/", b.addr) }

func (b *broker) dial() *amqp091.Connection {
	b.t.Helper()
	c, err := amqp091.Dial(b.url())
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { c.Close() })
	return c
}

func (b *broker) channel() *amqp091.Channel {
	b.t.Helper()
	ch, err := b.dial().Channel()
	if err != nil {
		b.t.Fatal(err)
	}
	return ch
}

// publishConfirmed publishes persistent messages and waits for each ack.
func publishConfirmed(t *testing.T, ch *amqp091.Channel, queue string, bodies ...string) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, body := range bodies {
		dc, err := ch.PublishWithDeferredConfirm("", queue, false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, ContentType: "text/plain", Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatalf("publish %q nacked", body)
		}
	}
}

func recv(t *testing.T, c <-chan amqp091.Delivery) amqp091.Delivery {
	t.Helper()
	select {
	case d, ok := <-c:
		if !ok {
			t.Fatal("delivery channel closed")
		}
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery in 10s")
	}
	return amqp091.Delivery{}
}

// none checks that nothing more is delivered while the broker answers a
// round trip on the same connection (so a delivery sent before it would
// have arrived first).
func none(t *testing.T, ch *amqp091.Channel, c <-chan amqp091.Delivery, queue string) {
	t.Helper()
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-c:
		t.Fatalf("unexpected delivery %q (tag %d)", d.Body, d.DeliveryTag)
	default:
	}
}

// exception runs do on ch and returns the exception it caused: the error
// do returned if it carries a reply code the client got from the server,
// else the channel's close notification (a method sent after an
// asynchronous exception, such as one a publish caused, may meet the
// channel already closed and get a local "not open" instead).
func exception(t *testing.T, ch *amqp091.Channel, do func(*amqp091.Channel) error) error {
	t.Helper()
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	err := do(ch)
	var e *amqp091.Error
	if errors.As(err, &e) && e.Server {
		return err
	}
	select {
	case ce := <-closed:
		if ce == nil {
			return err
		}
		return ce
	case <-time.After(10 * time.Second):
		return err
	}
}
