package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/keelmq/keel/internal/core"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fakeCluster answers what a NameServer would from the registrations of
// its members: every member's Kafka address and its topics' queues.
type fakeCluster struct {
	mu      sync.Mutex
	members []clusterMember
	calls   int
	down    bool // answer an error, as when no NameServer answers
	// kept: topics the NameServer keeps after their deletion (a
	// registration never removes a topic)
	kept map[string][]TopicGroup
	// hidden: the "group/topic" shares the NameServer has not heard of
	// yet (a registration still to come)
	hidden map[string]bool
	// listed: the group/topic shares some answer listed so far
	listed map[string]bool
	// order: topics whose answers are checked against the groups hosting
	// them in layout order; gaps: the answers found listing a group's
	// share without a group before it (from which that group would number
	// its queues too low)
	order map[string][]string
	gaps  []string
}

// checkGaps records in f.gaps where v lists a share of a topic in
// f.order without the shares of every group before it; under f.mu.
func (f *fakeCluster) checkGaps(v ClusterView, who string) {
	for topic, groups := range f.order {
		missing := ""
		for _, g := range groups {
			listed := slices.ContainsFunc(v.Topics[topic], func(tg TopicGroup) bool { return tg.Group == g })
			switch {
			case !listed && missing == "":
				missing = g
			case listed && missing != "":
				f.gaps = append(f.gaps, who+" listed "+g+"'s share of "+topic+" without "+missing+"'s")
			}
		}
	}
}

// gapsSeen returns the gaps recorded so far.
func (f *fakeCluster) gapsSeen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.gaps)
}

// wasListed reports whether an answer listed group's share of topic.
func (f *fakeCluster) wasListed(group, topic string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listed[group+"/"+topic]
}

type clusterMember struct {
	group    string
	brokerID int64
	nodeID   int32
	epoch    int32
	inSync   []int64
	node     *testNode
	noDoor   bool // a slave: a replica without a Kafka door
	rack     string
}

func (f *fakeCluster) add(m clusterMember) {
	f.mu.Lock()
	f.members = append(f.members, m)
	f.mu.Unlock()
}

func (f *fakeCluster) KafkaCluster(context.Context) (ClusterView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return ClusterView{}, errors.New("no NameServer answered")
	}
	v := f.view()
	f.checkGaps(v, "the NameServer")
	return v, nil
}

// view is what the members registered; under f.mu.
func (f *fakeCluster) view() ClusterView {
	v := ClusterView{Topics: map[string][]TopicGroup{}}
	for name, tgs := range f.kept {
		v.Topics[name] = append(v.Topics[name], tgs...)
	}
	for _, m := range f.members {
		host, port, _ := net.SplitHostPort(m.node.addr)
		n, _ := strconv.Atoi(port)
		if m.noDoor {
			host, n = "", 0
		}
		v.Brokers = append(v.Brokers, ClusterBroker{Group: m.group, BrokerID: m.brokerID, NodeID: m.nodeID,
			Host: host, Port: int32(n), Epoch: m.epoch, InSync: m.inSync, Addr: m.node.addr, Rack: m.rack})
		if m.brokerID != 0 {
			continue // the master's registration carries the queues
		}
		for _, tc := range m.node.core.Topics() {
			if f.hidden[m.group+"/"+tc.TopicName] {
				continue
			}
			v.Topics[tc.TopicName] = append(v.Topics[tc.TopicName], TopicGroup{Group: m.group, Queues: tc.ReadQueueNums})
			if f.listed == nil {
				f.listed = map[string]bool{}
			}
			f.listed[m.group+"/"+tc.TopicName] = true
		}
	}
	return v
}

// fakeNamesrvs is several NameServers over the registrations of one
// fakeCluster: each may be dead (answers an error) or not yet have a
// share (its registration late there).
type fakeNamesrvs struct {
	f *fakeCluster // its mu guards the fields below too
	// late[i]["group/topic"]: NameServer i leaves that share out of its
	// next so many answers that would list it
	late []map[string]int
	dead []bool
}

func newFakeNamesrvs(f *fakeCluster, n int) *fakeNamesrvs {
	ns := &fakeNamesrvs{f: f, dead: make([]bool, n)}
	for range n {
		ns.late = append(ns.late, map[string]int{})
	}
	return ns
}

// answer is NameServer i's answer.
func (ns *fakeNamesrvs) answer(i int) (ClusterView, error) {
	f := ns.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if ns.dead[i] {
		return ClusterView{}, errors.New("NameServer " + strconv.Itoa(i) + ": connection refused")
	}
	v := f.view()
	for topic, tgs := range v.Topics {
		kept := tgs[:0:0]
		for _, tg := range tgs {
			if k := tg.Group + "/" + topic; ns.late[i][k] > 0 {
				ns.late[i][k]--
				continue
			}
			kept = append(kept, tg)
		}
		v.Topics[topic] = kept
	}
	f.checkGaps(v, "NameServer "+strconv.Itoa(i))
	return v, nil
}

// via is the Cluster of a broker configured with these NameServers in
// order: its view is the first answer (KafkaCluster), and ClusterEach
// asks them all.
func (ns *fakeNamesrvs) via(order ...int) Cluster { return namesrvList{ns, order} }

type namesrvList struct {
	ns    *fakeNamesrvs
	order []int
}

func (l namesrvList) KafkaCluster(context.Context) (ClusterView, error) {
	var err error
	for _, i := range l.order {
		var v ClusterView
		if v, err = l.ns.answer(i); err == nil {
			return v, nil
		}
	}
	return ClusterView{}, err
}

func (l namesrvList) KafkaClusterEach(context.Context) ([]ClusterView, error) {
	var out []ClusterView
	var err error
	for _, i := range l.order {
		v, aerr := l.ns.answer(i)
		if aerr != nil {
			err = aerr
			continue
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// startClusterNode starts a member of f: group's master unless brokerID.
func startClusterNode(t *testing.T, f *fakeCluster, group string, brokerID int64, nodeID int32) *testNode {
	t.Helper()
	n := startNodeWith(t, nil, Config{NodeID: nodeID, Group: group, BrokerID: brokerID, Cluster: f})
	f.add(clusterMember{group: group, brokerID: brokerID, nodeID: nodeID, epoch: -1, node: n})
	return n
}

func createLocalTopic(t *testing.T, n *testNode, name string, queues int32) {
	t.Helper()
	if _, err := n.core.EnsureTopic(name, queues, core.PermRW); err != nil {
		t.Fatal(err)
	}
}

// refreshViews has each node fetch the cluster view now (as it does every
// clusterRefresh), after a test changed what the cluster holds.
func refreshViews(nodes ...*testNode) {
	for _, n := range nodes {
		n.srv.refreshCluster()
	}
}

func metadataOf(t *testing.T, addr, topic string) *kmsg.MetadataResponse {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestClusterMetadataAndLeaders: two groups (broker-b with a slave,
// broker-a) hosting one topic; each broker answers the same Metadata:
// every broker, partitions broker-a's queues then broker-b's, leaders the
// masters, replicas the members, ISR and epoch as registered; produce and
// fetch of a partition another broker leads answer
// NOT_LEADER_OR_FOLLOWER; franz-go, seeded with one broker, produces
// acks=all to every partition and reads every record back, each stored in
// its group's queue.
func TestClusterMetadataAndLeaders(t *testing.T) {
	f := &fakeCluster{}
	b0 := startClusterNode(t, f, "broker-b", 0, 10)
	b1 := startClusterNode(t, f, "broker-b", 1, 11)
	a0 := startClusterNode(t, f, "broker-a", 0, 20)
	f.mu.Lock()
	f.members[0].epoch, f.members[0].inSync = 4, []int64{0} // b's slave is behind
	f.mu.Unlock()
	createLocalTopic(t, a0, "T", 2)
	createLocalTopic(t, b0, "T", 3)
	createLocalTopic(t, b1, "T", 3) // as replication would
	createLocalTopic(t, b0, "OnlyB", 1)
	createLocalTopic(t, b1, "OnlyB", 1)
	refreshViews(a0, b0, b1)

	type want struct {
		leader   int32
		epoch    int32
		replicas []int32
		isr      []int32
	}
	wantA := want{20, 0, []int32{20}, []int32{20}}
	wantB := want{10, 4, []int32{10, 11}, []int32{10}}
	wantParts := []want{wantA, wantA, wantB, wantB, wantB}
	for _, n := range []*testNode{a0, b0, b1} {
		m := metadataOf(t, n.addr, "T")
		if len(m.Brokers) != 3 || m.Brokers[0].NodeID != 10 || m.Brokers[1].NodeID != 11 || m.Brokers[2].NodeID != 20 ||
			fmt.Sprint(m.Brokers[2].Port) != mustPort(t, a0.addr) {
			t.Fatalf("%s: brokers %+v", n.addr, m.Brokers)
		}
		if m.ControllerID != 10 {
			t.Errorf("%s: controller %d", n.addr, m.ControllerID)
		}
		if len(m.Topics) != 1 || len(m.Topics[0].Partitions) != 5 {
			t.Fatalf("%s: topics %+v", n.addr, m.Topics)
		}
		for i, p := range m.Topics[0].Partitions {
			w := wantParts[i]
			if p.Partition != int32(i) || p.ErrorCode != 0 || p.Leader != w.leader || p.LeaderEpoch != w.epoch ||
				fmt.Sprint(p.Replicas) != fmt.Sprint(w.replicas) || fmt.Sprint(p.ISR) != fmt.Sprint(w.isr) {
				t.Errorf("%s: partition %d: %+v, want %+v", n.addr, i, p, w)
			}
		}
		// A topic only another group hosts is described, not created here.
		if m := metadataOf(t, n.addr, "OnlyB"); len(m.Topics) != 1 || len(m.Topics[0].Partitions) != 1 || m.Topics[0].Partitions[0].Leader != 10 {
			t.Errorf("%s: OnlyB %+v", n.addr, m.Topics)
		}
	}
	if _, ok := a0.core.Topic("OnlyB"); ok {
		t.Fatal("Metadata of a topic hosted elsewhere created it here")
	}

	// A raw produce of partition 3 (broker-b's queue 1) to broker-a, and
	// to b's slave, is refused; so is a fetch.
	for _, n := range []*testNode{a0, b1} {
		if code := rawProduce(t, n.addr, "T", 3); code != errNotLeaderOrFollower {
			t.Errorf("%s: produce of a partition it does not lead: code %d", n.addr, code)
		}
		if code := rawFetch(t, n.addr, "T", 3); code != errNotLeaderOrFollower {
			t.Errorf("%s: fetch of a partition it does not lead: code %d", n.addr, code)
		}
	}
	if code := rawProduce(t, a0.addr, "T", 5); code != errUnknownTopicOrPartition {
		t.Errorf("produce beyond the partitions: code %d", code)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(b1.addr), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const perPartition = 3
	for p := int32(0); p < 5; p++ {
		for i := 0; i < perPartition; i++ {
			r := &kgo.Record{Topic: "T", Partition: p, Value: fmt.Appendf(nil, "p%d-%d", p, i)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce to partition %d: %v", p, err)
			}
			if r.Offset != int64(i) {
				t.Fatalf("partition %d record %d at offset %d", p, i, r.Offset)
			}
		}
	}
	// Partitions 0-1 are broker-a's queues 0-1, 2-4 broker-b's 0-2.
	for q, n := range map[int]int64{0: perPartition, 1: perPartition} {
		if got := a0.st.MaxOffset("T", int32(q)); got != n {
			t.Errorf("broker-a queue %d holds %d entries", q, got)
		}
	}
	for q := int32(0); q < 3; q++ {
		if got := b0.st.MaxOffset("T", q); got != perPartition {
			t.Errorf("broker-b queue %d holds %d entries", q, got)
		}
	}
	if got := b1.st.MaxOffset("T", 0); got != 0 {
		t.Errorf("b's slave stored %d entries", got)
	}

	offsets := map[int32]kgo.Offset{}
	for p := int32(0); p < 5; p++ {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cc, err := kgo.NewClient(kgo.SeedBrokers(a0.addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"T": offsets}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	got := map[int32][]string{}
	for n := 0; n < 5*perPartition; {
		fs := cc.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %v: %v", got, err)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			n++
		})
	}
	for p := int32(0); p < 5; p++ {
		if fmt.Sprint(got[p]) != fmt.Sprintf("[p%d-0 p%d-1 p%d-2]", p, p, p) {
			t.Errorf("partition %d: %v", p, got[p])
		}
	}

	// ListOffsets and DeleteRecords: answered by the leader only, on its
	// own queue.
	if code, off := rawListLatest(t, b0.addr, "T", 4); code != 0 || off != perPartition {
		t.Errorf("list offsets on the leader: code %d offset %d", code, off)
	}
	if code, _ := rawListLatest(t, a0.addr, "T", 4); code != errNotLeaderOrFollower {
		t.Errorf("list offsets on another broker: code %d", code)
	}
	if code := rawDeleteRecords(t, a0.addr, "T", 2, 1); code != errNotLeaderOrFollower {
		t.Errorf("delete records on another broker: code %d", code)
	}
	if code := rawDeleteRecords(t, b0.addr, "T", 2, 1); code != 0 {
		t.Errorf("delete records on the leader: code %d", code)
	}
	if tc, _ := b0.core.Topic("T"); deletedBelow(tc, 0) != 1 {
		t.Errorf("delete records of partition 2 did not move queue 0's start: %v", tc.Attributes)
	}

	// Creating a topic another group hosts is refused; so is raising the
	// partitions of a topic whose last group (which takes the new queues)
	// this broker cannot reach (no Peers).
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.TimeoutMillis = 5000
	ctt := kmsg.NewCreateTopicsRequestTopic()
	ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = "OnlyB", 1, -1
	ct.Topics = append(ct.Topics, ctt)
	if r := dialRaw(t, a0.addr).do(ct, 5).(*kmsg.CreateTopicsResponse); r.Topics[0].ErrorCode != errTopicAlreadyExists {
		t.Errorf("create a topic hosted by another group: %d", r.Topics[0].ErrorCode)
	}
	if _, ok := a0.core.Topic("OnlyB"); ok {
		t.Error("CreateTopics of a topic hosted elsewhere created it here")
	}
	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.TimeoutMillis = 5000
	cpt := kmsg.NewCreatePartitionsRequestTopic()
	cpt.Topic, cpt.Count = "T", 4
	cp.Topics = append(cp.Topics, cpt)
	if r := dialRaw(t, a0.addr).do(cp, 3).(*kmsg.CreatePartitionsResponse); r.Topics[0].ErrorCode != errInvalidRequest {
		t.Errorf("create partitions of a topic over two groups: %d", r.Topics[0].ErrorCode)
	}
	if tc, _ := a0.core.Topic("T"); tc.ReadQueueNums != 2 {
		t.Errorf("broker-a's queues of T: %d", tc.ReadQueueNums)
	}

	// DescribeCluster lists every broker.
	req := kmsg.NewPtrDescribeClusterRequest()
	dresp, err := req.RequestWith(ctx, cl)
	if err != nil || len(dresp.Brokers) != 3 || dresp.ControllerID != 10 {
		t.Fatalf("describe cluster: %+v %v", dresp, err)
	}
}

// TestClusterNoMaster: a group without a live master has partitions
// without a leader (LEADER_NOT_AVAILABLE), and its slave does not take
// them.
func TestClusterNoMaster(t *testing.T) {
	f := &fakeCluster{}
	a0 := startClusterNode(t, f, "broker-a", 0, 1)
	b1 := startClusterNode(t, f, "broker-b", 1, 2)
	createLocalTopic(t, a0, "T", 1)
	createLocalTopic(t, b1, "T", 1)
	refreshViews(a0, b1)
	// The master's registration carried b's queues; with it gone only the
	// slave's topic table knows them.
	m := metadataOf(t, b1.addr, "T")
	if len(m.Topics) != 1 || len(m.Topics[0].Partitions) != 2 {
		t.Fatalf("topics %+v", m.Topics)
	}
	p := m.Topics[0].Partitions[1]
	if p.Leader != -1 || p.ErrorCode != errLeaderNotAvailable || fmt.Sprint(p.Replicas) != "[2]" {
		t.Fatalf("partition of the group without a master: %+v", p)
	}
	if code := rawProduce(t, b1.addr, "T", 1); code != errNotLeaderOrFollower {
		t.Fatalf("slave took a produce: %d", code)
	}
}

// TestClusterMetadataRefreshed: a Metadata answer uses a view at most
// metadataFresh old, so a new member is seen at once.
func TestClusterMetadataRefreshed(t *testing.T) {
	f := &fakeCluster{}
	a0 := startClusterNode(t, f, "broker-a", 0, 1)
	createLocalTopic(t, a0, "T", 1)
	if m := metadataOf(t, a0.addr, "T"); len(m.Brokers) != 1 {
		t.Fatalf("brokers %+v", m.Brokers)
	}
	b0 := startClusterNode(t, f, "broker-b", 0, 2)
	createLocalTopic(t, b0, "T", 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := metadataOf(t, a0.addr, "T")
		if len(m.Brokers) == 2 && len(m.Topics[0].Partitions) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new group never showed: %+v", m)
		}
		time.Sleep(metadataFresh / 2)
	}
}

// TestClusterLocalReplicationState: a master's own Metadata takes its
// group's epoch and in-sync set from its replication state; another
// broker's, from the master's registration.
func TestClusterLocalReplicationState(t *testing.T) {
	f := &fakeCluster{}
	b0 := startNodeWith(t, nil, Config{NodeID: 10, Group: "broker-b", Cluster: f,
		LocalGroup: func() LocalGroup { return LocalGroup{Epoch: 7, InSync: []int64{0, 1}} }})
	f.add(clusterMember{group: "broker-b", nodeID: 10, epoch: 4, inSync: []int64{0}, node: b0})
	f.add(clusterMember{group: "broker-b", brokerID: 1, nodeID: 11, epoch: 4, node: b0}) // a slave (its address is not used)
	a0 := startClusterNode(t, f, "broker-a", 0, 20)
	createLocalTopic(t, b0, "T", 1)
	refreshViews(a0, b0)
	for _, c := range []struct {
		n     *testNode
		epoch int32
		isr   string
	}{{b0, 7, "[10 11]"}, {a0, 4, "[10]"}} {
		m := metadataOf(t, c.n.addr, "T")
		if len(m.Topics) != 1 || len(m.Topics[0].Partitions) != 1 {
			t.Fatalf("%+v", m.Topics)
		}
		p := m.Topics[0].Partitions[0]
		if p.Leader != 10 || p.LeaderEpoch != c.epoch || fmt.Sprint(p.ISR) != c.isr || fmt.Sprint(p.Replicas) != "[10 11]" {
			t.Errorf("through %s: %+v, want epoch %d ISR %s", c.n.addr, p, c.epoch, c.isr)
		}
	}
}

// TestClusterDeletedTopicNotListed: a topic deleted here is gone from
// Metadata although the NameServer still has this group's queues of it.
func TestClusterDeletedTopicNotListed(t *testing.T) {
	f := &fakeCluster{}
	a0 := startClusterNode(t, f, "broker-a", 0, 1)
	createLocalTopic(t, a0, "T", 2)
	f.mu.Lock()
	f.kept = map[string][]TopicGroup{"T": {{Group: "broker-a", Queues: 2}}}
	f.mu.Unlock()
	if err := a0.core.DeleteTopic("T"); err != nil {
		t.Fatal(err)
	}
	refreshViews(a0)
	m := dialRaw(t, a0.addr).do(kmsg.NewPtrMetadataRequest(), 9).(*kmsg.MetadataResponse)
	for _, rt := range m.Topics {
		if *rt.Topic == "T" {
			t.Fatalf("deleted topic listed: %+v", rt)
		}
	}
}

// TestClusterSlaveLaysOutATopicItsReplicaHasNotYet: broker-a (master,
// and a slave with a follower door) and broker-b host topic N, one queue
// each; the slave's topic table does not have N yet (replication brings
// it after the master registered it). The slave still answers Metadata as
// the masters do — partition 0 broker-a's, partition 1 broker-b's — and
// does not renumber broker-b's queue as partition 0 (a producer told so
// would send partition 0's records to broker-b). A fetch of its own
// partition answers UNKNOWN_TOPIC_OR_PARTITION (retried) until the topic
// is there, one of broker-b's NOT_LEADER_OR_FOLLOWER.
func TestClusterSlaveLaysOutATopicItsReplicaHasNotYet(t *testing.T) {
	f := &fakeCluster{}
	a0 := startClusterNode(t, f, "broker-a", 0, 1)
	s1 := startNodeWith(t, nil, Config{NodeID: 2, Group: "broker-a", BrokerID: 1, Cluster: f, Rack: "s", Follower: true})
	f.add(clusterMember{group: "broker-a", brokerID: 1, nodeID: 2, epoch: -1, node: s1, rack: "s"})
	b0 := startClusterNode(t, f, "broker-b", 0, 11)
	createLocalTopic(t, a0, "N", 1)
	createLocalTopic(t, b0, "N", 1)
	refreshViews(a0, s1, b0)
	for _, n := range []*testNode{a0, b0, s1} {
		m := metadataOf(t, n.addr, "N")
		if len(m.Topics) != 1 || len(m.Topics[0].Partitions) != 2 {
			t.Fatalf("%s: topics %+v", n.addr, m.Topics)
		}
		for i, leader := range []int32{1, 11} {
			if p := m.Topics[0].Partitions[i]; p.Partition != int32(i) || p.ErrorCode != 0 || p.Leader != leader {
				t.Errorf("%s: partition %d: %+v, want leader %d", n.addr, i, p, leader)
			}
		}
	}
	if code := rawFetch(t, s1.addr, "N", 1); code != errNotLeaderOrFollower {
		t.Errorf("fetch of broker-b's partition at broker-a's slave: code %d", code)
	}
	if code := rawFetch(t, s1.addr, "N", 0); code != errUnknownTopicOrPartition {
		t.Errorf("fetch of its own partition before its replica has the topic: code %d", code)
	}
	createLocalTopic(t, s1, "N", 1) // as replication would
	if code := rawFetch(t, s1.addr, "N", 0); code != errNone {
		t.Errorf("fetch of its own partition: code %d", code)
	}
}

// TestClusterTopicCreatedAfterTheView: broker-b's view is fetched before
// topic N exists; then N is created over broker-a and broker-b, one queue
// each (broker-a's share registered first). broker-b's next requests do
// not number N's partitions from that older view, which lacks broker-a's
// share (partition 0 would be broker-b's queue): a produce of partition 0
// to broker-b answers NOT_LEADER_OR_FOLLOWER and stores nothing there,
// and its Metadata lists both partitions, partition 0 broker-a's.
func TestClusterTopicCreatedAfterTheView(t *testing.T) {
	f := &fakeCluster{}
	a0 := startClusterNode(t, f, "broker-a", 0, 1)
	b0 := startClusterNode(t, f, "broker-b", 0, 11)
	refreshViews(a0, b0)
	if b0.srv.cluster(false) == nil { // derived from the view without N
		t.Fatal("no cluster state")
	}
	createLocalTopic(t, a0, "N", 1)
	createLocalTopic(t, b0, "N", 1)
	if code := rawProduce(t, b0.addr, "N", 0); code != errNotLeaderOrFollower {
		t.Errorf("produce of partition 0 (broker-a's) to broker-b: code %d, want %d", code, errNotLeaderOrFollower)
	}
	if n := b0.st.MaxOffset("N", 0); n != 0 {
		t.Errorf("broker-b's queue 0 of N holds %d entries", n)
	}
	m := metadataOf(t, b0.addr, "N")
	if len(m.Topics) != 1 || len(m.Topics[0].Partitions) != 2 || m.Topics[0].Partitions[0].Leader != 1 || m.Topics[0].Partitions[1].Leader != 11 {
		t.Errorf("broker-b's Metadata of N: %+v", m.Topics)
	}
	if code := rawProduce(t, b0.addr, "N", 1); code != errNone {
		t.Errorf("produce of partition 1 to broker-b: code %d", code)
	}
}

// TestClusterNamesrvDown: while the NameServers do not answer, Metadata
// answers from the last view, and requests arriving together share one
// attempt.
func TestClusterNamesrvDown(t *testing.T) {
	f := &fakeCluster{}
	a0 := startClusterNode(t, f, "broker-a", 0, 1)
	b0 := startClusterNode(t, f, "broker-b", 0, 2)
	createLocalTopic(t, a0, "T", 1)
	createLocalTopic(t, b0, "T", 1)
	refreshViews(a0)
	f.mu.Lock()
	f.down, f.calls = true, 0
	f.mu.Unlock()
	rc := dialRaw(t, a0.addr)
	req := kmsg.NewPtrMetadataRequest()
	start := time.Now()
	for range 20 {
		m := rc.do(req, 9).(*kmsg.MetadataResponse)
		if len(m.Brokers) != 2 || len(m.Topics) != 1 || len(m.Topics[0].Partitions) != 2 {
			t.Fatalf("metadata with the NameServers down: %+v", m)
		}
	}
	f.mu.Lock()
	calls := f.calls
	f.mu.Unlock()
	// 20 requests in well under a second: one attempt per metadataFresh
	// (plus the background refresh), not one each.
	if limit := 2 + 2*int(time.Since(start)/metadataFresh) + 2; calls > limit {
		t.Fatalf("%d attempts for 20 requests in %v", calls, time.Since(start))
	}
}

func mustPort(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// rawProduce sends one batch for topic's partition p to the broker at
// addr alone and returns the partition's error code.
func rawProduce(t *testing.T, addr, topic string, p int32) int16 {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = p, testBatch(1, 0)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := dialRaw(t, addr).do(req, 9).(*kmsg.ProduceResponse)
	return resp.Topics[0].Partitions[0].ErrorCode
}

func rawFetch(t *testing.T, addr, topic string, p int32) int16 {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes = 12, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = p, 1<<20, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := dialRaw(t, addr).do(req, 12).(*kmsg.FetchResponse)
	return resp.Topics[0].Partitions[0].ErrorCode
}

func rawListLatest(t *testing.T, addr, topic string, p int32) (int16, int64) {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := dialRaw(t, addr).do(req, 7).(*kmsg.ListOffsetsResponse)
	return resp.Topics[0].Partitions[0].ErrorCode, resp.Topics[0].Partitions[0].Offset
}

func rawDeleteRecords(t *testing.T, addr, topic string, p int32, off int64) int16 {
	t.Helper()
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = 5000
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = p, off
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := dialRaw(t, addr).do(req, 2).(*kmsg.DeleteRecordsResponse)
	return resp.Topics[0].Partitions[0].ErrorCode
}

// TestClusterKcat: librdkafka (kcat), seeded with broker-a only, lists
// both groups' leaders, produces acks=all to broker-b's partition and
// reads it back; the records are in broker-b's queue.
func TestClusterKcat(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat is not installed (apt-get install kcat): librdkafka compatibility not tested")
	}
	f := &fakeCluster{}
	a0 := startClusterNode(t, f, "broker-a", 0, 1)
	b0 := startClusterNode(t, f, "broker-b", 0, 2)
	createLocalTopic(t, a0, "T", 1)
	createLocalTopic(t, b0, "T", 1)
	refreshViews(a0, b0)
	meta, _ := kcat(t, "", "-L", "-b", a0.addr, "-t", "T")
	if !strings.Contains(meta, "2 brokers:") || !strings.Contains(meta, `topic "T" with 2 partitions`) ||
		!strings.Contains(meta, "partition 0, leader 1,") || !strings.Contains(meta, "partition 1, leader 2,") {
		t.Fatalf("kcat -L:\n%s", meta)
	}
	_, stderr := kcat(t, "x\ny\nz\n", "-P", "-b", a0.addr, "-t", "T", "-p", "1", "-X", "acks=all")
	if strings.Contains(stderr, "ERROR") {
		t.Fatalf("kcat -P: %s", stderr)
	}
	if got := b0.st.MaxOffset("T", 0); got != 3 {
		t.Fatalf("broker-b's queue 0 holds %d entries", got)
	}
	if got := a0.st.MaxOffset("T", 0); got != 0 {
		t.Fatalf("broker-a's queue 0 holds %d entries", got)
	}
	out, _ := kcat(t, "", "-C", "-b", a0.addr, "-t", "T", "-p", "1", "-o", "beginning", "-e", "-f", "%p %o %s\n")
	if strings.TrimSpace(out) != "1 0 x\n1 1 y\n1 2 z" {
		t.Fatalf("kcat -C: %q", out)
	}
}

// TestClusterSarama: sarama, seeded with broker-a only, produces with
// WaitForAll (idempotent) to every partition of a topic over two groups,
// one with a slave without a door among its replicas, and consumes each
// partition back from its leader.
func TestClusterSarama(t *testing.T) {
	f := &fakeCluster{}
	a0 := startClusterNode(t, f, "broker-a", 0, 1)
	b0 := startClusterNode(t, f, "broker-b", 0, 2)
	f.mu.Lock()
	f.members = append(f.members, clusterMember{group: "broker-b", brokerID: 1, nodeID: 3, epoch: -1, node: b0, noDoor: true})
	f.members[1].inSync = []int64{0, 1}
	f.mu.Unlock()
	createLocalTopic(t, a0, "S", 2)
	createLocalTopic(t, b0, "S", 2)
	refreshViews(a0, b0)
	m := metadataOf(t, a0.addr, "S")
	if len(m.Brokers) != 2 || len(m.Topics) != 1 || len(m.Topics[0].Partitions) != 4 ||
		fmt.Sprint(m.Topics[0].Partitions[3].Replicas) != "[2 3]" || fmt.Sprint(m.Topics[0].Partitions[3].ISR) != "[2 3]" {
		t.Fatalf("metadata: brokers %+v topics %+v", m.Brokers, m.Topics)
	}
	cfg := saramaConfig()
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer([]string{a0.addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for part := int32(0); part < 4; part++ {
		for i := range 3 {
			gotPart, off, err := p.SendMessage(&sarama.ProducerMessage{Topic: "S", Partition: part, Value: sarama.StringEncoder(fmt.Sprintf("s%d-%d", part, i))})
			if err != nil || gotPart != part || off != int64(i) {
				t.Fatalf("send to partition %d: partition %d offset %d: %v", part, gotPart, off, err)
			}
		}
	}
	for q := int32(0); q < 2; q++ {
		if a0.st.MaxOffset("S", q) != 3 || b0.st.MaxOffset("S", q) != 3 {
			t.Fatalf("queue %d: broker-a %d, broker-b %d entries", q, a0.st.MaxOffset("S", q), b0.st.MaxOffset("S", q))
		}
	}
	c, err := sarama.NewConsumer([]string{a0.addr}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for part := int32(0); part < 4; part++ {
		pc, err := c.ConsumePartition("S", part, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("partition %d: %v", part, err)
		}
		for i := range 3 {
			select {
			case m := <-pc.Messages():
				if string(m.Value) != fmt.Sprintf("s%d-%d", part, i) || m.Offset != int64(i) {
					t.Fatalf("partition %d: %q at %d", part, m.Value, m.Offset)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("partition %d: record %d not consumed", part, i)
			}
		}
		pc.Close()
	}
}

// TestAbsentGroupKeepsItsPartitions: when every member of broker-a is away
// from the NameServer at once (all restarting for a role change), T keeps
// its five partitions at broker-b's door: broker-a's two without a leader
// (LEADER_NOT_AVAILABLE; a produce there answers NOT_LEADER_OR_FOLLOWER),
// broker-b's still partitions 2-4, never renumbered to 0-2; back, broker-a
// leads them again; a topic a registered group no longer lists loses its
// partitions there at once; a group away longer than absentGroupHold is
// left out.
func TestAbsentGroupKeepsItsPartitions(t *testing.T) {
	f := &fakeCluster{}
	a0 := startClusterNode(t, f, "broker-a", 0, 20)
	b0 := startClusterNode(t, f, "broker-b", 0, 10)
	createLocalTopic(t, a0, "T", 2)
	createLocalTopic(t, b0, "T", 3)
	refreshViews(b0)
	leaders := func() []int32 {
		var out []int32
		m := metadataOf(t, b0.addr, "T")
		for _, p := range m.Topics[0].Partitions {
			if (p.Leader < 0) != (p.ErrorCode == errLeaderNotAvailable) {
				t.Fatalf("partition %d: leader %d, code %d", p.Partition, p.Leader, p.ErrorCode)
			}
			out = append(out, p.Leader)
		}
		return out
	}
	if got := leaders(); fmt.Sprint(got) != "[20 20 10 10 10]" {
		t.Fatalf("leaders %v", got)
	}
	f.mu.Lock()
	members := f.members
	f.members = []clusterMember{members[1]} // broker-a away
	f.mu.Unlock()
	refreshViews(b0)
	if got := leaders(); fmt.Sprint(got) != "[-1 -1 10 10 10]" {
		t.Fatalf("leaders with broker-a away: %v (its partitions must stay, without a leader)", got)
	}
	if code := rawProduce(t, b0.addr, "T", 0); code != errNotLeaderOrFollower {
		t.Errorf("produce of broker-a's partition at broker-b: code %d", code)
	}
	if code := rawProduce(t, b0.addr, "T", 2); code != errNone {
		t.Errorf("produce of broker-b's first partition: code %d", code)
	}
	if off := b0.st.MaxOffset("T", 0); off != 1 {
		t.Errorf("broker-b's queue 0 holds %d records, want the one produced to partition 2", off)
	}
	f.mu.Lock()
	f.members = members
	f.mu.Unlock()
	refreshViews(b0)
	if got := leaders(); fmt.Sprint(got) != "[20 20 10 10 10]" {
		t.Fatalf("leaders with broker-a back: %v", got)
	}
	// broker-a deletes T: its partitions go at once.
	if err := a0.core.DeleteTopic("T"); err != nil {
		t.Fatal(err)
	}
	refreshViews(b0)
	if got := leaders(); fmt.Sprint(got) != "[10 10 10]" {
		t.Fatalf("leaders after broker-a deleted T: %v", got)
	}
	// Away longer than absentGroupHold: left out.
	createLocalTopic(t, a0, "U", 2)
	createLocalTopic(t, b0, "U", 1)
	refreshViews(b0)
	old := absentGroupHold
	absentGroupHold = 0
	t.Cleanup(func() { absentGroupHold = old })
	f.mu.Lock()
	f.members = []clusterMember{members[1]}
	f.mu.Unlock()
	refreshViews(b0)
	if m := metadataOf(t, b0.addr, "U"); len(m.Topics[0].Partitions) != 1 || m.Topics[0].Partitions[0].Leader != 10 {
		t.Fatalf("U with broker-a gone beyond the hold: %+v", m.Topics[0].Partitions)
	}
}
