package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestShares(t *testing.T) {
	for _, c := range []struct {
		n    int32
		g    int
		want string
	}{{8, 2, "[4 4]"}, {5, 2, "[3 2]"}, {7, 3, "[3 2 2]"}, {1, 3, "[1 0 0]"}} {
		if got := fmtInts(shares(c.n, c.g)); got != c.want {
			t.Errorf("shares(%d, %d) = %s, want %s", c.n, c.g, got, c.want)
		}
	}
}

func fmtInts(v []int32) string {
	out := "["
	for i, n := range v {
		if i > 0 {
			out += " "
		}
		out += itoa32(n)
	}
	return out + "]"
}

// TestClusterCreateTopicsSpread: over two groups (broker-a node 20,
// broker-b node 10), kadm's CreateTopics of 5 partitions through broker-a
// creates 3 queues on broker-a and 2 on broker-b (with the topic's
// configs on both) and answers 5; Metadata from either broker agrees.
// CreatePartitions to 7 through broker-a adds broker-b's queues 2-3
// (partitions 5-6): partition 4 is still broker-b's queue 1, with its
// record. A group failing its share undoes the others' and refuses the
// topic: TOPIC_ALREADY_EXISTS when the topic is there,
// COORDINATOR_NOT_AVAILABLE when its master does not answer.
func TestClusterCreateTopicsSpread(t *testing.T) {
	f := &fakeCluster{}
	peers := &fakePeers{}
	b0 := startPeerNode(t, f, peers, "broker-b", 10)
	a0 := startPeerNode(t, f, peers, "broker-a", 20)
	refreshViews(a0, b0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(a0.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ret := "3600000"
	cr, err := adm.CreateTopic(ctx, 5, -1, map[string]*string{"retention.ms": &ret}, "S")
	if err != nil || cr.Err != nil || cr.NumPartitions != 5 {
		t.Fatalf("create S: %+v %v", cr, err)
	}
	for _, w := range []struct {
		n *testNode
		q int32
	}{{a0, 3}, {b0, 2}} {
		tc, ok := w.n.core.Topic("S")
		if !ok || tc.ReadQueueNums != w.q || tc.WriteQueueNums != w.q || tc.Attributes["kafka.retention.ms"] != ret {
			t.Errorf("%s: S %+v %v, want %d queues with retention.ms", w.n.addr, tc, ok, w.q)
		}
	}
	for _, n := range []*testNode{a0, b0} {
		m := metadataOf(t, n.addr, "S")
		var leaders []int32
		for _, p := range m.Topics[0].Partitions {
			leaders = append(leaders, p.Leader)
		}
		if fmtInts(leaders) != "[20 20 20 10 10]" {
			t.Errorf("%s: S's leaders %v", n.addr, leaders)
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "S", Partition: 4, Value: []byte("p4")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if hw := b0.core.MaxOffset("S", 1); hw != 1 {
		t.Fatalf("partition 4's record not in broker-b's queue 1: max offset %d", hw)
	}

	if _, err := adm.CreatePartitions(ctx, 2, "S"); err != nil {
		t.Fatal(err)
	}
	if tc, _ := b0.core.Topic("S"); tc.ReadQueueNums != 4 {
		t.Errorf("broker-b's queues of S after CreatePartitions to 7: %d", tc.ReadQueueNums)
	}
	if tc, _ := a0.core.Topic("S"); tc.ReadQueueNums != 3 {
		t.Errorf("broker-a's queues of S after CreatePartitions to 7: %d", tc.ReadQueueNums)
	}
	if m := metadataOf(t, b0.addr, "S"); len(m.Topics[0].Partitions) != 7 {
		t.Errorf("S has %d partitions after CreatePartitions to 7", len(m.Topics[0].Partitions))
	}
	cc, err := kgo.NewClient(kgo.SeedBrokers(a0.addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"S": {4: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	fs := cc.PollFetches(ctx)
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "p4" || recs[0].Partition != 4 {
		t.Fatalf("partition 4 after CreatePartitions: %+v %v", recs, fs.Errors())
	}

	// broker-b holds X already, its registration not seen yet.
	f.mu.Lock()
	f.hidden = map[string]bool{"broker-b/X": true}
	f.mu.Unlock()
	createLocalTopic(t, b0, "X", 1)
	create := func(name string) int16 {
		t.Helper()
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 5000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 4, -1
		req.Topics = append(req.Topics, rt)
		return requestTo(t, a0.addr, req).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
	}
	if code := create("X"); code != errTopicAlreadyExists {
		t.Errorf("create X, which broker-b has: code %d", code)
	}
	if _, ok := a0.core.Topic("X"); ok {
		t.Error("broker-a's share of X was not undone")
	}
	peers.mu.Lock()
	peers.down = true
	peers.mu.Unlock()
	if code := create("F"); code != errCoordinatorNotAvailable {
		t.Errorf("create F with broker-b unreachable: code %d", code)
	}
	if _, ok := a0.core.Topic("F"); ok {
		t.Error("broker-a's share of F was not undone")
	}
}

// TestPreferredReadReplica: the leader of broker-a (rack m) names its
// slave (node 2, rack s, a follower door) as the preferred read replica
// of a consumer in rack s while the slave is in sync, with no records;
// not for its own rack, an unknown one or none, nor once the slave is
// out of sync; the slave itself never redirects.
func TestPreferredReadReplica(t *testing.T) {
	f, a0, s1 := startRackPair(t)
	for rack, want := range map[string]int32{"s": 2, "m": -1, "x": -1, "": -1} {
		if got := a0.srv.cluster(false).preferredReader(rack); got != want {
			t.Errorf("leader, rack %q: preferred %d, want %d", rack, got, want)
		}
	}
	if got := s1.srv.cluster(false).preferredReader("s"); got != -1 {
		t.Errorf("the slave redirects to %d", got)
	}
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes, req.Rack = 12, 1<<20, "s"
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "P"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = 1<<20, -1, -1
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	p := dialRaw(t, a0.addr).do(req, 12).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 || p.PreferredReadReplica != 2 || len(p.RecordBatches) != 0 || p.HighWatermark != 1 {
		t.Errorf("fetch from rack s at the leader: %+v", p)
	}
	f.mu.Lock()
	f.members[0].inSync = []int64{0} // the slave fell behind
	f.mu.Unlock()
	refreshViews(a0)
	if got := a0.srv.cluster(false).preferredReader("s"); got != -1 {
		t.Errorf("an out-of-sync slave is preferred: %d", got)
	}
}

// TestClusterCreateTopicsListsItsShareFirst: CreateTopics at broker-a
// spreading N over broker-a and broker-b asks broker-b for its share only
// once the NameServer lists broker-a's, so that any view broker-b fetches
// after making its share (cluster.go's topicsChanged) lists broker-a's
// before it: broker-b never numbers its queue partition 0.
func TestClusterCreateTopicsListsItsShareFirst(t *testing.T) {
	f := &fakeCluster{}
	peers := &fakePeers{}
	a0 := startPeerNode(t, f, peers, "broker-a", 1)
	b0 := startPeerNode(t, f, peers, "broker-b", 11)
	refreshViews(a0, b0)
	asked := make(chan bool, 1)
	peers.mu.Lock()
	peers.onCreate = func(_, topic string) { asked <- f.wasListed("broker-a", topic) }
	peers.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(a0.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if cr, err := kadm.NewClient(cl).CreateTopic(ctx, 2, -1, nil, "N"); err != nil || cr.Err != nil || cr.NumPartitions != 2 {
		t.Fatalf("create N: %+v %v", cr, err)
	}
	select {
	case listed := <-asked:
		if !listed {
			t.Error("broker-b was asked for its share of N before the NameServer listed broker-a's")
		}
	default:
		t.Fatal("broker-b was not asked for its share")
	}
	if _, ok := b0.core.Topic("N"); !ok {
		t.Fatal("broker-b has no share of N")
	}
}

// startRackPair starts broker-a's master (node 1, rack m) and its slave's
// follower door (node 2, rack s, in sync) on one fake cluster, with topic
// P of one queue holding one record produced at the master.
func startRackPair(t *testing.T) (f *fakeCluster, a0, s1 *testNode) {
	t.Helper()
	f = &fakeCluster{}
	a0 = startNodeWith(t, nil, Config{NodeID: 1, Group: "broker-a", Cluster: f, Rack: "m"})
	s1 = startNodeWith(t, nil, Config{NodeID: 2, Group: "broker-a", BrokerID: 1, Cluster: f, Rack: "s", Follower: true})
	f.add(clusterMember{group: "broker-a", nodeID: 1, epoch: -1, node: a0, rack: "m", inSync: []int64{0, 1}})
	f.add(clusterMember{group: "broker-a", brokerID: 1, nodeID: 2, epoch: -1, node: s1, rack: "s"})
	createLocalTopic(t, a0, "P", 1)
	createLocalTopic(t, s1, "P", 1)
	refreshViews(a0, s1)
	if got := rawProduce(t, a0.addr, "P", 0); got != 0 {
		t.Fatalf("produce: %d", got)
	}
	return f, a0, s1
}

// TestClusterCreateTopicsInLayoutOrder: over three groups (broker-a node
// 1, broker-b node 11, broker-c node 21), CreateTopics makes the shares
// one group at a time in brokerName order, each only once the NameServer
// lists the ones before it, so no answer of the NameServer ever lists a
// group's share without every share before it (a group numbering from
// such a view numbers its queues too low). L is created through broker-a,
// broker-b's master holding its share up to a second and then taking an
// answer (as a refresh at that moment would), so that broker-c asked at
// the same time would be seen making its share before broker-b's; M
// through broker-b, the middle group, whose own share must wait for
// broker-a's.
func TestClusterCreateTopicsInLayoutOrder(t *testing.T) {
	abc := []string{"broker-a", "broker-b", "broker-c"}
	f := &fakeCluster{order: map[string][]string{"L": abc, "M": abc}}
	peers := &fakePeers{}
	a0 := startPeerNode(t, f, peers, "broker-a", 1)
	b0 := startPeerNode(t, f, peers, "broker-b", 11)
	c0 := startPeerNode(t, f, peers, "broker-c", 21)
	refreshViews(a0, b0, c0)
	peers.mu.Lock()
	peers.onCreate = func(addr, topic string) {
		if addr != b0.addr {
			return
		}
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if _, ok := c0.core.Topic(topic); ok {
				break
			}
		}
		f.KafkaCluster(context.Background())
	}
	peers.mu.Unlock()
	for topic, via := range map[string]*testNode{"L": a0, "M": b0} {
		if code := createTopicAt(t, via.addr, topic, 3); code != errNone {
			t.Fatalf("create %s through %s: code %d", topic, via.addr, code)
		}
		for _, n := range []*testNode{a0, b0, c0} {
			if tc, ok := n.core.Topic(topic); !ok || tc.ReadQueueNums != 1 {
				t.Errorf("%s: %s %+v %v, want 1 queue", n.addr, topic, tc, ok)
			}
		}
		var leaders []int32
		for _, p := range metadataOf(t, c0.addr, topic).Topics[0].Partitions {
			leaders = append(leaders, p.Leader)
		}
		if fmtInts(leaders) != "[1 11 21]" {
			t.Errorf("broker-c's Metadata of %s: leaders %v", topic, leaders)
		}
	}
	for _, g := range f.gapsSeen() {
		t.Error(g)
	}
}

// TestClusterCreateTopicsWaitsForEveryNamesrv: with three NameServers,
// broker-a asking them in order 0, 1, 2 and broker-b in order 1, 0, 2,
// NameServer 1 late with broker-a's registration of T (its next three
// answers that would list it leave it out) and NameServer 2 down,
// CreateTopics of T through broker-a asks broker-b for its share only
// once NameServer 1 lists broker-a's too, and the dead NameServer delays
// nothing past layoutWait: broker-b's view (NameServer 1's) never numbers
// its queue partition 0, so a produce of partition 0 there answers
// NOT_LEADER_OR_FOLLOWER and stores nothing. A NameServer that does not
// list the share by layoutWait refuses the topic with REQUEST_TIMED_OUT,
// broker-b never asked and broker-a's share undone.
func TestClusterCreateTopicsWaitsForEveryNamesrv(t *testing.T) {
	f := &fakeCluster{order: map[string][]string{"T": {"broker-a", "broker-b"}, "U": {"broker-a", "broker-b"}}}
	ns := newFakeNamesrvs(f, 3)
	ns.late[1]["broker-a/T"] = 3
	ns.late[1]["broker-a/U"] = 1 << 30
	ns.dead[2] = true
	peers := &fakePeers{}
	a0 := startPeerNodeVia(t, f, ns.via(0, 1, 2), peers, "broker-a", 1)
	b0 := startPeerNodeVia(t, f, ns.via(1, 0, 2), peers, "broker-b", 11)
	refreshViews(a0, b0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(a0.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	start := time.Now()
	cr, err := adm.CreateTopic(ctx, 2, -1, nil, "T")
	if err != nil || cr.Err != nil || cr.NumPartitions != 2 {
		t.Fatalf("create T: %+v %v", cr, err)
	}
	if d := time.Since(start); d >= layoutWait {
		t.Errorf("create T took %v", d)
	}
	if code := rawProduce(t, b0.addr, "T", 0); code != errNotLeaderOrFollower {
		t.Errorf("produce of partition 0 (broker-a's) to broker-b: code %d, want %d", code, errNotLeaderOrFollower)
	}
	if n := b0.st.MaxOffset("T", 0); n != 0 {
		t.Errorf("broker-b's queue 0 of T holds %d entries", n)
	}
	for _, g := range f.gapsSeen() {
		t.Error(g)
	}

	if code := createTopicAt(t, a0.addr, "U", 2); code != errRequestTimedOut {
		t.Errorf("create U, never listed by NameServer 1: code %d, want %d", code, errRequestTimedOut)
	}
	if _, ok := a0.core.Topic("U"); ok {
		t.Error("broker-a's share of U was not undone")
	}
	if _, ok := b0.core.Topic("U"); ok {
		t.Error("broker-b was asked for its share of U")
	}
}

// createTopicAt sends a CreateTopics of topic with parts partitions to the
// broker at addr alone (a client sends it to the controller) and returns
// its error code.
func createTopicAt(t *testing.T, addr, topic string, parts int32) int16 {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, parts, -1
	req.Topics = append(req.Topics, rt)
	return requestTo(t, addr, req).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
}

// TestClusterRefusesAViewMissingAShareBefore: N created through broker-a
// over broker-a and broker-b (one queue each) records in broker-b's share
// that broker-a's comes before it. Once broker-b's view shows broker-a in
// the cluster but no longer its share of N (a NameServer that lost that
// registration), broker-b does not number its queue from that view (it
// would be partition 0): a produce of partition 0 there answers
// NOT_LEADER_OR_FOLLOWER and stores nothing; with the share listed again,
// partition 1 is served. broker-b's slave (node 12, a follower door, its
// replica of N as replication brings it) refuses a fetch of partition 0
// from such a view alike.
func TestClusterRefusesAViewMissingAShareBefore(t *testing.T) {
	f := &fakeCluster{}
	peers := &fakePeers{}
	a0 := startPeerNode(t, f, peers, "broker-a", 1)
	b0 := startPeerNode(t, f, peers, "broker-b", 11)
	s1 := startNodeWith(t, nil, Config{NodeID: 12, Group: "broker-b", BrokerID: 1, Cluster: f, Follower: true})
	f.add(clusterMember{group: "broker-b", brokerID: 1, nodeID: 12, epoch: -1, node: s1})
	refreshViews(a0, b0, s1)
	if code := createTopicAt(t, a0.addr, "N", 2); code != errNone {
		t.Fatalf("create N: code %d", code)
	}
	share, _ := b0.core.Topic("N")
	if err := s1.core.UpdateKafkaTopic(share); err != nil { // as replication would
		t.Fatal(err)
	}
	if tc, _ := b0.core.Topic("N"); tc.Attributes[attrSpreadAfter] != "broker-a" {
		t.Fatalf("broker-b's share of N: attributes %v", tc.Attributes)
	}
	if tc, _ := a0.core.Topic("N"); tc.Attributes[attrSpreadAfter] != "" {
		t.Fatalf("broker-a's share of N: attributes %v", tc.Attributes)
	}
	f.mu.Lock()
	f.hidden = map[string]bool{"broker-a/N": true}
	f.mu.Unlock()
	refreshViews(b0, s1)
	if code := rawFetch(t, s1.addr, "N", 0); code != errNotLeaderOrFollower {
		t.Errorf("fetch of partition 0 at broker-b's slave, its view without broker-a's share: code %d, want %d", code, errNotLeaderOrFollower)
	}
	if code := rawProduce(t, b0.addr, "N", 0); code != errNotLeaderOrFollower {
		t.Errorf("produce of partition 0 to broker-b, its view without broker-a's share: code %d, want %d", code, errNotLeaderOrFollower)
	}
	if n := b0.st.MaxOffset("N", 0); n != 0 {
		t.Errorf("broker-b's queue 0 of N holds %d entries", n)
	}
	f.mu.Lock()
	f.hidden = nil
	f.mu.Unlock()
	refreshViews(b0, s1)
	if code := rawFetch(t, s1.addr, "N", 1); code != errNone {
		t.Errorf("fetch of partition 1 at broker-b's slave with the view complete: code %d", code)
	}
	if code := rawProduce(t, b0.addr, "N", 1); code != errNone {
		t.Errorf("produce of partition 1 to broker-b with the view complete: code %d", code)
	}
	if n := b0.st.MaxOffset("N", 0); n != 1 {
		t.Errorf("broker-b's queue 0 of N holds %d entries, want 1", n)
	}
}

// createPartitionsAt sends a CreatePartitions of topic to count to the
// broker at addr and returns its error code.
func createPartitionsAt(t *testing.T, addr, topic string, count int32) int16 {
	t.Helper()
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.TimeoutMillis = 10000
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, count
	req.Topics = append(req.Topics, rt)
	return requestTo(t, addr, req).(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode
}

// TestClusterCreatePartitionsWaitsForAgreement: T spread over broker-a and
// broker-b; NameServer 1, the one broker-a's view comes from, loses
// broker-b's share (as after its restart). CreatePartitions at broker-a
// would take T for broker-a's alone and add the queues there, renumbering
// broker-b's partition; it answers REQUEST_TIMED_OUT (retriable) and
// changes nothing while the NameServers disagree, and adds the queues to
// broker-b, the last group, once they agree again.
func TestClusterCreatePartitionsWaitsForAgreement(t *testing.T) {
	f := &fakeCluster{order: map[string][]string{"T": {"broker-a", "broker-b"}}}
	ns := newFakeNamesrvs(f, 2)
	peers := &fakePeers{}
	a0 := startPeerNodeVia(t, f, ns.via(1, 0), peers, "broker-a", 1)
	b0 := startPeerNodeVia(t, f, ns.via(0, 1), peers, "broker-b", 11)
	refreshViews(a0, b0)
	if code := createTopicAt(t, a0.addr, "T", 2); code != errNone {
		t.Fatalf("create T: code %d", code)
	}
	f.mu.Lock()
	ns.late[1]["broker-b/T"] = 1 << 30
	f.mu.Unlock()
	refreshViews(a0)
	if code := createPartitionsAt(t, a0.addr, "T", 4); code != errRequestTimedOut {
		t.Errorf("create partitions while NameServer 1 misses broker-b's share: code %d, want %d", code, errRequestTimedOut)
	}
	ta, _ := a0.core.Topic("T")
	tb, _ := b0.core.Topic("T")
	if ta.ReadQueueNums != 1 || tb.ReadQueueNums != 1 {
		t.Fatalf("queues of T while the NameServers disagree: broker-a %d, broker-b %d; want 1 and 1", ta.ReadQueueNums, tb.ReadQueueNums)
	}
	f.mu.Lock()
	ns.late[1]["broker-b/T"] = 0
	f.mu.Unlock()
	if code := createPartitionsAt(t, a0.addr, "T", 4); code != errNone {
		t.Fatalf("create partitions once the NameServers agree: code %d", code)
	}
	ta, _ = a0.core.Topic("T")
	tb, _ = b0.core.Topic("T")
	if ta.ReadQueueNums != 1 || tb.ReadQueueNums != 3 {
		t.Errorf("queues of T after growing to 4: broker-a %d, broker-b %d; want 1 and 3", ta.ReadQueueNums, tb.ReadQueueNums)
	}
}
