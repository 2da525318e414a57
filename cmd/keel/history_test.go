package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/controller"
	"github.com/keelmq/keel/internal/faultproxy"
	"github.com/keelmq/keel/internal/history"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/twmb/franz-go/pkg/kgo"
)

// historyCluster is a controller-mode group of three SYNC_MASTER brokers
// (each with a Kafka and an AMQP door). On loopback it has a fault proxy
// on every link a test may break: each broker reaches each controller
// through a proxy of its own (toCtrl[broker][controller]), and each
// broker's replicas reach its replication listener through a proxy
// (repl[broker]); the controllers reach the brokers directly. In network
// namespaces (netns) it has none: the faults are the namespaces' links.
type historyCluster = ctrlCluster

func historyClusterOpts(netns *netnsLayout) ctrlClusterOpts {
	return ctrlClusterOpts{name: "HistoryCluster", kafka: true, amqp: true,
		ctrlProxies: netns == nil, replProxies: netns == nil, netns: netns}
}

// startHistoryCluster starts the history test's cluster on loopback.
func startHistoryCluster(t *testing.T) *historyCluster {
	t.Helper()
	return startCtrlCluster(t, historyClusterOpts(nil))
}

// remotingFrame reads one remoting frame (a 4-byte big-endian length and
// that many bytes) whole.
func remotingFrame(r *bufio.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 16<<20 {
		return nil, fmt.Errorf("remoting frame of %d bytes", size)
	}
	b := make([]byte, 4+size)
	copy(b, n[:])
	if _, err := io.ReadFull(r, b[4:]); err != nil {
		return nil, err
	}
	return b, nil
}

// historyFault is one entry of a fault schedule: what, and for how long
// before it is healed.
type historyFault struct {
	kind string
	dur  time.Duration
}

func (f historyFault) String() string { return f.kind + " for " + f.dur.String() }

// The fault kinds. Every one is healed (a killed process restarted, a
// stopped one continued, a link healed) before the next begins, once
// the group has a master and all three in sync again.
const (
	faultKillMaster      = "kill -9 master"
	faultKillSlave       = "kill -9 slave"
	faultStopMaster      = "SIGSTOP master"
	faultStopSlave       = "SIGSTOP slave"
	faultKillFollower    = "kill -9 controller follower"
	faultStopLeader      = "SIGSTOP controller leader"
	faultKillLeader      = "kill -9 controller leader"
	faultCutCtrl         = "cut master-controllers"
	faultCutCtrlOneWay   = "cut master-to-controllers one way"
	faultHoldReplication = "hold master replication"
	faultCutReplication  = "cut master replication"
	faultSlowReplication = "slow master replication"

	// Network namespaces (TestControllerHistoryNetns).
	faultLinkDownMaster = "link down master"
	faultLinkDownSlave  = "link down slave"
	faultLinkDownLeader = "link down controller leader"
	faultPartCtrl       = "partition master-controllers"
	faultSlowLink       = "slow master link"
)

var allFaultKinds = []string{faultKillMaster, faultKillSlave, faultStopMaster, faultStopSlave, faultStopLeader, faultKillLeader,
	faultKillFollower, faultCutCtrl, faultCutCtrlOneWay, faultHoldReplication, faultCutReplication, faultSlowReplication}

// netnsFaultKinds are the faults of the run in network namespaces: the
// processes' faults, and the namespaces' links in place of the proxies:
// a node's only link down (cut from every other node, both ways: the
// controllers, the replicas, the clients), the master partitioned from
// the controllers only (blackhole routes both ways between its address
// and theirs; the clients and the replicas still reach it), the master's
// link rate-limited each way (htb).
var netnsFaultKinds = []string{faultKillMaster, faultKillSlave, faultStopMaster, faultStopSlave, faultStopLeader, faultKillLeader,
	faultKillFollower, faultLinkDownMaster, faultLinkDownSlave, faultLinkDownLeader, faultPartCtrl, faultSlowLink}

// ciNetnsFaultKinds are the short run's faults in network namespaces.
var ciNetnsFaultKinds = []string{faultLinkDownMaster, faultPartCtrl, faultSlowLink, faultLinkDownLeader}

// replacesMaster reports whether fault kind k, lasting long enough, must
// make the controllers elect another master.
func replacesMaster(k string) bool {
	return k == faultCutCtrl || k == faultCutCtrlOneWay || k == faultLinkDownMaster || k == faultPartCtrl
}

// ciFaultKinds are the short run's faults, one each, in an order and with
// durations drawn from its fixed seed.
var ciFaultKinds = []string{faultKillMaster, faultHoldReplication, faultCutReplication, faultStopMaster, faultStopLeader, faultKillLeader,
	faultCutCtrl, faultSlowReplication}

// faultSchedule draws faults from seed: in the short run every kind of
// kinds once, in a random order; in the long one kinds at random, for as
// long as the caller asks (next reports false when the short run's list
// is done). The same seed gives the same sequence.
type faultSchedule struct {
	r     *rand.Rand
	kinds []string
	order []int // short run: the permutation left
	long  bool
}

func newFaultSchedule(seed uint64, kinds []string, long bool) *faultSchedule {
	s := &faultSchedule{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), kinds: kinds, long: long}
	if !long {
		s.order = s.r.Perm(len(kinds))
	}
	return s
}

func (s *faultSchedule) next() (historyFault, bool) {
	var k string
	if s.long {
		k = s.kinds[s.r.IntN(len(s.kinds))]
	} else {
		if len(s.order) == 0 {
			return historyFault{}, false
		}
		k, s.order = s.kinds[s.order[0]], s.order[1:]
	}
	f := historyFault{kind: k, dur: time.Duration(2500+s.r.IntN(3000)) * time.Millisecond}
	if replacesMaster(k) {
		// Long enough for the controllers to notice (2 s without a
		// heartbeat, which comes every second) and elect: the test
		// checks that they did.
		f.dur = max(f.dur, 4*time.Second)
	}
	return f, true
}

// inject starts fault f on hc and returns what heals it. It logs a skip
// line and returns nil when f cannot be injected now.
func (hc *historyCluster) inject(t *testing.T, f historyFault) func() {
	t.Helper()
	g := hc.actingGroup(t)
	if g == nil || g.MasterID == 0 {
		t.Logf("fault %s: skipped, the group has no master", f.kind)
		return nil
	}
	master := brokerOf(t, hc.brokers, g, g.MasterID)
	slave := (master + 1) % len(hc.brokers)
	t.Logf("fault %s: the master is broker %d (replica %d, epoch %d), the slave faulted broker %d", f.kind, master, g.MasterID, g.MasterEpoch, slave)
	switch f.kind {
	case faultKillMaster, faultKillSlave:
		i := master
		if f.kind == faultKillSlave {
			i = slave
		}
		b := hc.brokers[i]
		b.proc.cmd.Process.Signal(syscall.SIGKILL)
		<-b.proc.exited
		return func() { b.start(t) }
	case faultStopMaster, faultStopSlave:
		i := master
		if f.kind == faultStopSlave {
			i = slave
		}
		p := hc.brokers[i].proc
		p.cmd.Process.Signal(syscall.SIGSTOP)
		return func() { p.cmd.Process.Signal(syscall.SIGCONT) }
	case faultStopLeader, faultKillLeader, faultKillFollower:
		st, ok := controllerStatus(t, hc.ctrl)
		i := slices.Index(hc.ctrl, st.LeaderAddr)
		if !ok || i < 0 {
			t.Logf("fault %s: skipped, no leader known (%+v)", f.kind, st)
			return nil
		}
		if f.kind == faultKillFollower {
			i = (i + 1) % len(hc.ctrl)
		}
		p := hc.cprocs[i]
		if f.kind != faultStopLeader {
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
			// Restarted from its data directory, without --bootstrap.
			return func() { hc.startController(t, i, false) }
		}
		p.cmd.Process.Signal(syscall.SIGSTOP)
		return func() { p.cmd.Process.Signal(syscall.SIGCONT) }
	case faultCutCtrl, faultCutCtrlOneWay:
		if len(hc.toCtrl) == 0 {
			break
		}
		for _, p := range hc.toCtrl[master] {
			if f.kind == faultCutCtrl {
				p.Cut(faultproxy.Both)
			} else {
				p.Cut(faultproxy.Forward) // heartbeats lost; the controllers' answers still pass
			}
		}
		return func() {
			for _, p := range hc.toCtrl[master] {
				p.Heal()
			}
		}
	case faultHoldReplication, faultCutReplication, faultSlowReplication:
		if len(hc.repl) == 0 {
			break
		}
		p := hc.repl[master]
		switch f.kind {
		case faultHoldReplication:
			p.Hold(faultproxy.Both)
		case faultCutReplication:
			p.Cut(faultproxy.Both)
		default:
			p.Slow(faultproxy.Both, 40*time.Millisecond)
		}
		return p.Heal
	}
	if l := hc.opts.netns; l != nil {
		mnode, snode := brokerNode(0, master), brokerNode(0, slave)
		must := func(err error) {
			if err != nil {
				t.Fatalf("fault %s: %v", f.kind, err)
			}
		}
		switch f.kind {
		case faultLinkDownMaster, faultLinkDownSlave, faultLinkDownLeader:
			node := mnode
			switch f.kind {
			case faultLinkDownSlave:
				node = snode
			case faultLinkDownLeader:
				st, ok := controllerStatus(t, hc.ctrl)
				i := slices.Index(hc.ctrl, st.LeaderAddr)
				if !ok || i < 0 {
					t.Logf("fault %s: skipped, no leader known (%+v)", f.kind, st)
					return nil
				}
				node = ctrlNode(i)
			}
			must(l.linkDown(node, true))
			return func() { must(l.linkDown(node, false)) }
		case faultPartCtrl:
			ctrls := []string{ctrlNode(0), ctrlNode(1), ctrlNode(2)}
			must(l.partition(mnode, ctrls, true))
			return func() { must(l.partition(mnode, ctrls, false)) }
		case faultSlowLink:
			must(l.slow(mnode, true))
			return func() { must(l.slow(mnode, false)) }
		}
	}
	t.Fatalf("unknown fault kind %q (or one this cluster cannot inject)", f.kind)
	return nil
}

// actingGroup is the group as the acting controller leader holds it
// (nil when no acting leader answers): a follower's view may lag.
func (hc *historyCluster) actingGroup(t *testing.T) *controller.Group {
	st, ok := controllerStatus(t, hc.ctrl)
	if !ok || !st.Acting {
		return nil
	}
	for _, g := range st.Groups {
		if g.Name == hc.name {
			return g
		}
	}
	return nil
}

// recovered reports whether the group has a master and all three
// members in sync, and the controllers an acting leader.
func (hc *historyCluster) recovered(t *testing.T) bool {
	st, ok := controllerStatus(t, hc.ctrl)
	if !ok || !st.Acting {
		return false
	}
	for _, g := range st.Groups {
		if g.Name == "broker-a" {
			return g.MasterID != 0 && len(g.InSync) == 3
		}
	}
	return false
}

// historyClient is one client family recording into a history: its
// producers send until stop, its consumer groups receive throughout.
type historyClient interface {
	family() string
	groups() []string
	stop() // stops the producers (the consumers go on)
	close()
}

const historyPayload = "0123456789abcdefghijklmnopqrstuvwxyz"

func historyBody(id string, n int) []byte {
	return history.Body(id, []byte(strings.Repeat(historyPayload, 1+n%8)))
}

// rocketmqHistory is the official RocketMQ Go client: a producer with
// retries and a push consumer group.
type rocketmqHistory struct {
	p    rocketmq.Producer
	c    rocketmq.PushConsumer
	done chan struct{}
	wg   sync.WaitGroup
}

func startRocketMQHistory(t *testing.T, ns, topic string, h *history.History) *rocketmqHistory {
	t.Helper()
	rlog.SetLogLevel("error")
	c, err := consumer.NewPushConsumer(consumer.WithNameServer([]string{ns}), consumer.WithGroupName("hist-rg"),
		consumer.WithInstance("hist-rc"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			now := time.Now()
			for _, m := range ms {
				h.AddDelivery("rocketmq", "hist-rg", fmt.Sprintf("%s/%d", m.Queue.BrokerName, m.Queue.QueueId), m.QueueOffset, m.Body, now)
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	p, err := producer.NewDefaultProducer(producer.WithNameServer([]string{ns}), producer.WithGroupName("hist-rp"),
		producer.WithInstanceName("hist-rp"), producer.WithRetry(2), producer.WithSendMsgTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	r := &rocketmqHistory{p: p, c: c, done: make(chan struct{})}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for seq := 0; ; seq++ {
			select {
			case <-r.done:
				return
			default:
			}
			if s := officialSend(p, topic, fmt.Sprintf("r-%06d", seq), seq, h); !s.Acked {
				time.Sleep(50 * time.Millisecond) // do not spin on a dead route
			}
		}
	}()
	return r
}

func (r *rocketmqHistory) family() string   { return "rocketmq" }
func (r *rocketmqHistory) groups() []string { return []string{"hist-rg"} }
func (r *rocketmqHistory) stop() {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	r.wg.Wait()
}
func (r *rocketmqHistory) close() {
	r.stop()
	r.p.Shutdown()
	r.c.Shutdown()
}

// kafkaHistory is franz-go: an idempotent acks=all producer (one record
// in flight) and a group consumer.
type kafkaHistory struct {
	prod, cons *kgo.Client
	done       chan struct{}
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

func startKafkaHistory(t *testing.T, seeds []string, topic string, partitions int, h *history.History) *kafkaHistory {
	t.Helper()
	fast := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond })}
	cons, err := kgo.NewClient(append(fast, kgo.ConsumeTopics(topic), kgo.ConsumerGroup("hist-kg"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(200*time.Millisecond),
		kgo.FetchMaxWait(500*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	prod, err := kgo.NewClient(append(fast, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MetadataMaxAge(time.Second), kgo.ProduceRequestTimeout(3*time.Second),
		kgo.RequestTimeoutOverhead(2*time.Second), kgo.RecordDeliveryTimeout(15*time.Second))...)
	if err != nil {
		cons.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &kafkaHistory{prod: prod, cons: cons, done: make(chan struct{}), cancel: cancel}
	k.wg.Add(2)
	go func() {
		defer k.wg.Done()
		for ctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			fs := cons.PollFetches(pctx)
			pcancel()
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				h.AddDelivery("kafka", "hist-kg", fmt.Sprintf("%s/%d", r.Topic, r.Partition), r.Offset, r.Value, now)
			})
		}
	}()
	go func() {
		defer k.wg.Done()
		for seq := 0; ; seq++ {
			select {
			case <-k.done:
				return
			default:
			}
			id := fmt.Sprintf("k-%06d", seq)
			body := historyBody(id, seq)
			r := &kgo.Record{Topic: topic, Partition: int32(seq % partitions), Value: body}
			s := history.Send{Family: "kafka", ID: id, Sum: history.Checksum(body), Start: time.Now(), Offset: -1}
			err := prod.ProduceSync(ctx, r).FirstErr()
			s.End = time.Now()
			if err != nil {
				s.Err = err.Error()
			} else {
				s.Acked, s.Queue, s.Offset = true, fmt.Sprintf("%s/%d", topic, r.Partition), r.Offset
			}
			h.AddSend(s)
		}
	}()
	return k
}

func (k *kafkaHistory) family() string   { return "kafka" }
func (k *kafkaHistory) groups() []string { return []string{"hist-kg"} }
func (k *kafkaHistory) stop() {
	select {
	case <-k.done:
	default:
		close(k.done)
	}
}
func (k *kafkaHistory) close() {
	k.stop()
	k.cancel()
	k.wg.Wait()
	k.prod.Close()
	k.cons.Close()
}

// historySeed is KEEL_HISTORY_SEED, else 1 in the short run and the
// time in the long one.
func historySeed(t *testing.T, long bool) uint64 {
	if s := os.Getenv("KEEL_HISTORY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KEEL_HISTORY_SEED=%q: %v", s, err)
		}
		return v
	}
	if long {
		return uint64(time.Now().UnixNano())
	}
	return 1
}

// TestControllerHistory is a Jepsen-style history test of controller-mode
// failover, in real processes on loopback (three controllers, a
// NameServer, a SYNC_MASTER group of three brokers), with fault proxies
// on the brokers' links to the controllers and on the replication links.
// The official RocketMQ Go client (a producer with retries, a push
// consumer group), franz-go (an idempotent acks=all producer, a group
// consumer) and amqp091-go (a confirming publisher, a consumer) run
// throughout while a schedule of faults is injected and healed one after
// the other; every send and every delivery is recorded. After the last
// heal, once every acknowledged message has reached every group (or a
// deadline passed), the history is checked: no acknowledged message
// lost, no queue offset holding two messages, no phantom or corrupt
// delivery (history.Check); duplicates, reorderings and the availability
// around each fault are logged, and for each fault how long after it
// began the controllers named another master. Then every member's log is
// read offline: every message the RocketMQ producer was acknowledged is
// at the queue offset its SEND_OK named.
//
// The short run draws the order and durations of one fault of each of
// ciFaultKinds from seed 1. KEEL_LONG=1 draws faults of every kind at
// random for KEEL_HISTORY_DURATION (default 5m), from a seed it prints;
// KEEL_HISTORY_SEED replays one.
func TestControllerHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes")
	}
	runControllerHistory(t, nil)
}

// TestControllerHistoryNetns is TestControllerHistory with every process
// in a network namespace of its own (newNetnsLayout: veth pairs to one
// bridge, addresses of 10.231.0.0/24 only inside the namespaces), the
// clients too: the test runs itself again inside the clients' namespace,
// where the addresses the NameServer and Kafka Metadata advertise are
// reachable. The faults are the processes' (kill -9, SIGSTOP) and the
// links' (netnsFaultKinds: a node's link down, the master partitioned
// from the controllers only, the master's link slowed); the short run is
// one of each of ciNetnsFaultKinds. It skips, naming what is missing,
// where the machine cannot set namespaces up (not root, no ip netns, veth,
// bridge or htb). The namespaces are removed at the end, failed or not.
func TestControllerHistoryNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes")
	}
	if l := childNetnsLayout(t); l != nil {
		runControllerHistory(t, l)
		return
	}
	l, err := newNetnsLayout(t, historyNodes())
	if err != nil {
		t.Skipf("network namespaces cannot be set up here, the namespace faults are not injected: %v", err)
	}
	runInClientNetns(t, l, "TestControllerHistoryNetns")
}

// runControllerHistory is the history test, on loopback with proxies
// (netns nil) or in the namespaces of netns.
func runControllerHistory(t *testing.T, netns *netnsLayout) {
	long := os.Getenv("KEEL_LONG") == "1"
	seed := historySeed(t, long)
	total := 5 * time.Minute
	if s := os.Getenv("KEEL_HISTORY_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("KEEL_HISTORY_DURATION=%q: %v", s, err)
		}
		total = d
	}
	kinds := ciFaultKinds
	switch {
	case long && netns != nil:
		kinds = netnsFaultKinds
	case long:
		kinds = allFaultKinds
	case netns != nil:
		kinds = ciNetnsFaultKinds
	}
	schedule := newFaultSchedule(seed, kinds, long)
	replay := fmt.Sprintf("KEEL_HISTORY_SEED=%d", seed)
	if long {
		replay = fmt.Sprintf("KEEL_LONG=1 KEEL_HISTORY_SEED=%d KEEL_HISTORY_DURATION=%v", seed, total)
	}
	t.Logf("fault schedule: seed %d (replay: %s)", seed, replay)
	if netns != nil {
		t.Logf("network namespaces: bridge in %s, clients in %s at %s; fault kinds %q", netns.Bridge, netns.ns(clientNode), netns.ip(clientNode), kinds)
	} else {
		t.Logf("on loopback, fault proxies on the links; fault kinds %q (the namespace faults: TestControllerHistoryNetns)", kinds)
	}

	hc := startCtrlCluster(t, historyClusterOpts(netns))
	dumped := false
	t.Cleanup(func() {
		if t.Failed() && !dumped {
			dumpBrokers(t, hc.brokers)
		}
	})
	g := waitMasterElected(t, hc.brokers, hc.group)
	master := brokerOf(t, hc.brokers, g, g.MasterID)
	t.Logf("master: replica %d (broker %d) at epoch %d", g.MasterID, master, g.MasterEpoch)
	const rtopic, ktopic, partitions = "HistoryR", "HistoryK", 4
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	mc, err := remoting.Dial(ctx, hc.brokers[master].addr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{rtopic, ktopic} {
		if err := bench.CreateTopic(ctx, mc, tp, partitions); err != nil {
			t.Fatal(err)
		}
	}
	mc.Close()
	cancel()
	if len(hc.repl) > 0 {
		// The slaves replicate through the master's proxy.
		waitFor(t, "both slaves replicating through the master's proxy", 20*time.Second, func() bool {
			return hc.repl[master].Accepted() >= 2 && hc.repl[master].Forwarded(faultproxy.Backward) > 0
		})
	}

	h := &history.History{}
	clients := []historyClient{startRocketMQHistory(t, hc.ns, rtopic, h), startKafkaHistory(t, hc.kafka, ktopic, partitions, h),
		startAMQPHistory(t, hc.amqp, "hist-aq", h)}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	waitFor(t, "every family acknowledged and delivered before the first fault", 60*time.Second, func() bool {
		for _, c := range clients {
			if h.Acked(c.family()) < 20 || h.Delivered(c.family(), c.groups()...) != 0 {
				return false
			}
		}
		return true
	})

	faultsEnd := time.Now().Add(total)
	var done []historyFault
	var noMaster []time.Duration // per fault of done: from its start to another master named (-1: none)
	seenEpoch := g.MasterEpoch
	for i := 0; ; i++ {
		f, ok := schedule.next()
		if !ok || long && time.Now().After(faultsEnd) {
			break
		}
		// The newest epoch seen: a view a lagging controller gave is
		// never taken for the group's.
		epochBefore := seenEpoch
		if g := hc.actingGroup(t); g != nil {
			epochBefore = max(epochBefore, g.MasterEpoch)
		}
		heal := hc.inject(t, f)
		if heal == nil {
			continue
		}
		done = append(done, f)
		began := time.Now()
		idx := h.AddFault(f.kind, began)
		t.Logf("fault %d: %s for %v", i, f.kind, f.dur)
		// Until the group has recovered, the first time the controllers
		// name another master (at a newer epoch).
		newMaster := make(chan time.Duration, 1)
		stopWatch := make(chan struct{})
		go func() {
			for {
				select {
				case <-stopWatch:
					newMaster <- -1
					return
				default:
				}
				if g := hc.actingGroup(t); g != nil && g.MasterID != 0 && g.MasterEpoch > epochBefore {
					newMaster <- time.Since(began)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		time.Sleep(f.dur) // the fault's planned duration
		heal()
		healed := time.Now()
		h.Healed(idx, healed)
		// Recovered for a second on end: a replica that reconnects after
		// a replication fault may leave the in-sync set the controllers
		// hold once more, a moment after it looked back (the next fault
		// would then find only the master in sync, and no election
		// possible).
		deadline := time.Now().Add(60 * time.Second)
		var steadySince time.Time
		for {
			if !hc.recovered(t) {
				steadySince = time.Time{}
			} else if steadySince.IsZero() {
				steadySince = time.Now()
			} else if time.Since(steadySince) >= time.Second {
				break
			}
			if time.Now().After(deadline) {
				dumpBrokers(t, hc.brokers)
				dumped = true
				t.Fatalf("no master with all three in sync within 60 s of healing fault %d (%s; %s; faults %v)", i, f.kind, replay, done)
			}
			time.Sleep(100 * time.Millisecond)
		}
		close(stopWatch)
		replaced := <-newMaster
		if replaced >= 0 {
			t.Logf("fault %d: %s: the controllers named another master %v after it began", i, f.kind, replaced.Round(time.Millisecond))
		}
		noMaster = append(noMaster, replaced)
		if g := hc.actingGroup(t); g != nil {
			seenEpoch = max(seenEpoch, g.MasterEpoch)
			t.Logf("fault %d: %s healed; %v later the group had a master (replica %d, epoch %d) and all three in sync, for a second on end", i, f.kind,
				steadySince.Sub(healed).Round(time.Millisecond), g.MasterID, g.MasterEpoch)
			if replacesMaster(f.kind) && g.MasterEpoch <= epochBefore {
				t.Errorf("fault %d: %s for %v did not replace the master (still at epoch %d, replica %d): a controller link bypassed the fault", i, f.kind, f.dur, epochBefore, g.MasterID)
			}
		}
		// Traffic between faults: the Kafka and AMQP producers (which find
		// a new master within seconds; the RocketMQ producer waits for its
		// 30 s route read) acknowledged 10 more since the heal.
		since := map[string]int{}
		for _, c := range clients {
			since[c.family()] = h.Acked(c.family())
		}
		waitFor(t, fmt.Sprintf("traffic after fault %d", i), 60*time.Second, func() bool {
			for _, fam := range []string{"kafka", "amqp"} {
				if h.Acked(fam) < since[fam]+10 {
					return false
				}
			}
			return true
		})
	}
	before := map[string]int{}
	for _, c := range clients {
		waitFor(t, c.family()+" acknowledging again after the last fault", 60*time.Second, func() bool {
			if before[c.family()] == 0 {
				before[c.family()] = h.Acked(c.family())
			}
			return h.Acked(c.family()) > before[c.family()]
		})
		c.stop()
	}
	var expect []history.Expect
	drain := time.Now().Add(90 * time.Second)
	for _, c := range clients {
		for h.Delivered(c.family(), c.groups()...) != 0 && time.Now().Before(drain) {
			time.Sleep(100 * time.Millisecond)
		}
		expect = append(expect, history.Expect{Family: c.family(), Groups: c.groups()})
	}
	rep := h.Check(expect...)
	rep.Log(t.Logf)
	logMasterless(t, done, noMaster)
	if !rep.OK() {
		dumpBrokers(t, hc.brokers)
		dumped = true
		t.Fatalf("%d anomalies in the history (%s; faults %v)", len(rep.Anomalies), replay, done)
	}

	// Every message the RocketMQ producer was acknowledged is in every
	// member's log at the queue offset its SEND_OK named.
	for _, c := range clients {
		c.close()
	}
	clients = nil
	acked := map[string]ackedSend{}
	for _, s := range h.Sends("rocketmq") {
		if s.Acked {
			acked[string(historyBody(s.ID, idSeq(s.ID)))] = ackedSend{queue: int32(queueNum(s.Queue)), offset: s.Offset}
		}
	}
	for _, b := range hc.brokers {
		b.proc.cmd.Process.Signal(syscall.SIGTERM)
		<-b.proc.exited
		checkAcked(t, b.dir, rtopic, acked)
	}
}

// queueNum is the queue id of a history queue ("broker-a/3" is 3).
func queueNum(q string) int {
	n, _ := strconv.Atoi(q[strings.LastIndexByte(q, '/')+1:])
	return n
}

// idSeq is the sequence number of a history id ("r-000042" is 42).
func idSeq(id string) int {
	n, _ := strconv.Atoi(id[strings.IndexByte(id, '-')+1:])
	return n
}

// logMasterless logs, per fault kind, how often it replaced the master
// and the longest and mean time from its start to another master named.
func logMasterless(t *testing.T, done []historyFault, noMaster []time.Duration) {
	type agg struct {
		n, replaced int
		sum, worst  time.Duration
	}
	by := map[string]*agg{}
	var kinds []string
	for i, f := range done {
		a := by[f.kind]
		if a == nil {
			a = &agg{}
			by[f.kind] = a
			kinds = append(kinds, f.kind)
		}
		a.n++
		if d := noMaster[i]; d >= 0 {
			a.replaced++
			a.sum += d
			a.worst = max(a.worst, d)
		}
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		a := by[k]
		if a.replaced == 0 {
			t.Logf("faults %s: %d, the master kept every time", k, a.n)
			continue
		}
		t.Logf("faults %s: %d, %d replaced the master; from the fault to another master named: mean %v, longest %v", k, a.n, a.replaced,
			(a.sum / time.Duration(a.replaced)).Round(time.Millisecond), a.worst.Round(time.Millisecond))
	}
}
