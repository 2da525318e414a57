package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/core"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// fakePeers reaches the other members' cores as a master's
// KEEL_KAFKA_GROUP_OFFSETS handler would (internal/broker), by the address
// fakeCluster gives each member (its Kafka address).
type fakePeers struct {
	mu    sync.Mutex
	nodes map[string]*testNode
	calls int
	down  bool // every request fails, as when the master is unreachable
	// admin, when set, is whether the other masters let an account
	// (PeerUser; "": none) create and grow topics there, as their ACL
	// would (refused: an error wrapping core.ErrForbidden).
	admin      func(user string) bool
	topicUsers []string // the PeerUser of every CreateTopic and GrowTopic
	// onCreate, when set, is called as a CreateTopic arrives for the
	// master at addr.
	onCreate func(addr, topic string)
}

// topicNode is node for a CreateTopic or GrowTopic made for ctx's PeerUser.
func (p *fakePeers) topicNode(ctx context.Context, addr string) (*testNode, error) {
	user := PeerUser(ctx)
	p.mu.Lock()
	p.topicUsers = append(p.topicUsers, user)
	admin := p.admin
	p.mu.Unlock()
	if admin != nil && !admin(user) {
		return nil, core.Errorf(core.ErrForbidden, "%s answered NO_PERMISSION: %q is not an admin account", addr, user)
	}
	return p.node(addr)
}

func (p *fakePeers) node(addr string) (*testNode, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.down {
		return nil, errors.New("connection refused")
	}
	n := p.nodes[addr]
	if n == nil {
		return nil, fmt.Errorf("no broker at %s", addr)
	}
	return n, nil
}

func (p *fakePeers) CommitOffsets(_ context.Context, addr, group, topic string, offsets map[int32]int64) error {
	n, err := p.node(addr)
	if err != nil {
		return err
	}
	for q, off := range offsets {
		if err := n.core.CommitOffset(group, topic, q, off); err != nil {
			return err
		}
	}
	return n.core.FlushOffsets()
}

func (p *fakePeers) FetchOffsets(_ context.Context, addr, group, topic string) (map[string]map[int32]int64, error) {
	n, err := p.node(addr)
	if err != nil {
		return nil, err
	}
	topics := map[string]bool{topic: true}
	if topic == "" {
		topics = n.core.OffsetTopics(group)
	}
	out := map[string]map[int32]int64{}
	for t := range topics {
		tc, _ := n.core.Topic(t)
		for q := int32(0); q < tc.ReadQueueNums; q++ {
			if off, ok := n.core.ConsumerOffset(group, t, q, false); ok {
				if out[t] == nil {
					out[t] = map[int32]int64{}
				}
				out[t][q] = off
			}
		}
	}
	return out, nil
}

func (p *fakePeers) DeleteOffsets(_ context.Context, addr, group, topic string, queues []int32) error {
	n, err := p.node(addr)
	if err != nil {
		return err
	}
	for _, q := range queues {
		n.core.DeleteOffset(group, topic, q)
	}
	return n.core.FlushOffsets()
}

// startPeerNode starts the master of group in f, reachable through peers.
func startPeerNode(t *testing.T, f *fakeCluster, peers *fakePeers, group string, nodeID int32) *testNode {
	t.Helper()
	return startPeerNodeVia(t, f, f, peers, group, nodeID)
}

// startPeerNodeVia is startPeerNode with the member's view of f through
// cluster (its NameServers, fakeNamesrvs.via).
func startPeerNodeVia(t *testing.T, f *fakeCluster, cluster Cluster, peers *fakePeers, group string, nodeID int32) *testNode {
	t.Helper()
	n := startNodeWith(t, nil, Config{NodeID: nodeID, Group: group, Cluster: cluster, Peers: peers})
	f.add(clusterMember{group: group, nodeID: nodeID, epoch: -1, node: n})
	peers.mu.Lock()
	if peers.nodes == nil {
		peers.nodes = map[string]*testNode{}
	}
	peers.nodes[n.addr] = n
	peers.mu.Unlock()
	return n
}

// groupCoordinatedBy returns a group id whose coordinator is node.
func groupCoordinatedBy(t *testing.T, n *testNode, node int32) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		id := "cg-" + strconv.Itoa(i)
		if c := n.srv.coordinatorFor(id); c.code == errNone && c.node == node {
			return id
		}
	}
	t.Fatalf("no group id of the first 1000 is coordinated by node %d", node)
	return ""
}

func findCoordinator(t *testing.T, addr, group string) *kmsg.FindCoordinatorResponse {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.Version = 3
	req.CoordinatorKey = group
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// requestTo sends req to the broker at addr only (not wherever franz-go
// would route it), at the version req carries (0: its max).
func requestTo(t *testing.T, addr string, req kmsg.Request) kmsg.Response {
	t.Helper()
	v := req.GetVersion()
	if v == 0 {
		v = apis[req.Key()].max
	}
	return dialRaw(t, addr).do(req, v)
}

// TestClusterCoordinator: two broker groups (broker-a node 20 with two
// queues of T, broker-b node 10 with three). Every broker names the same
// coordinator for a group id, one of the masters, chosen by the id;
// group requests sent to the other broker answer NOT_COORDINATOR. A
// franz-go consumer group seeded with the non-coordinator reads every
// record of the five partitions and commits: each partition's offset is
// in the consumer-offset table of the group hosting it, under its queue
// id (broker-a's queues 0-1 = partitions 0-1, broker-b's 0-2 = 2-4), and
// kadm reads all five back through the coordinator. With the other
// master unreachable, a commit of its partitions is refused with
// COORDINATOR_NOT_AVAILABLE (and of the coordinator's own accepted), and
// OffsetFetch fails as a whole rather than answer a partial list.
func TestClusterCoordinator(t *testing.T) {
	f := &fakeCluster{}
	peers := &fakePeers{}
	b0 := startPeerNode(t, f, peers, "broker-b", 10)
	a0 := startPeerNode(t, f, peers, "broker-a", 20)
	createLocalTopic(t, a0, "T", 2)
	createLocalTopic(t, b0, "T", 3)
	refreshViews(a0, b0)

	for _, c := range []struct {
		coord, other *testNode
		node         int32
	}{{b0, a0, 10}, {a0, b0, 20}} {
		id := groupCoordinatedBy(t, a0, c.node)
		for _, n := range []*testNode{a0, b0} {
			if got := n.srv.coordinatorFor(id); got.code != errNone || got.node != c.node || fmt.Sprintf("%s:%d", got.host, got.port) != c.coord.addr {
				t.Errorf("%s: coordinator of %s: %+v, want node %d at %s", n.addr, id, got, c.node, c.coord.addr)
			}
			if r := findCoordinator(t, n.addr, id); r.ErrorCode != 0 || r.NodeID != c.node {
				t.Errorf("%s: FindCoordinator %s: %+v", n.addr, id, r)
			}
		}
		join := kmsg.NewPtrJoinGroupRequest()
		join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = id, 10000, 10000, "consumer"
		join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0, 0, 0}}}
		if r := requestTo(t, c.other.addr, join).(*kmsg.JoinGroupResponse); r.ErrorCode != errNotCoordinator {
			t.Errorf("JoinGroup %s at the other broker: code %d", id, r.ErrorCode)
		}
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Group, hb.MemberID, hb.Generation = id, "m", 1
		if r := requestTo(t, c.other.addr, hb).(*kmsg.HeartbeatResponse); r.ErrorCode != errNotCoordinator {
			t.Errorf("Heartbeat %s at the other broker: code %d", id, r.ErrorCode)
		}
		// A KIP-848 heartbeat and each group of an OffsetFetch v8+ as well.
		chb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		chb.Group, chb.MemberID, chb.MemberEpoch, chb.RebalanceTimeoutMillis, chb.SubscribedTopicNames = id, "m848", 0, 10000, []string{"T"}
		if r := requestTo(t, c.other.addr, chb).(*kmsg.ConsumerGroupHeartbeatResponse); r.ErrorCode != errNotCoordinator {
			t.Errorf("ConsumerGroupHeartbeat %s at the other broker: code %d", id, r.ErrorCode)
		}
		of := kmsg.NewPtrOffsetFetchRequest()
		of.Version = 8
		of.Groups = []kmsg.OffsetFetchRequestGroup{{Group: id}}
		if r := requestTo(t, c.other.addr, of).(*kmsg.OffsetFetchResponse); len(r.Groups) != 1 || r.Groups[0].ErrorCode != errNotCoordinator {
			t.Errorf("OffsetFetch v8 of %s at the other broker: %+v", id, r.Groups)
		}
		sync := kmsg.NewPtrSyncGroupRequest()
		sync.Group, sync.MemberID, sync.Generation = id, "m", 1
		if r := requestTo(t, c.other.addr, sync).(*kmsg.SyncGroupResponse); r.ErrorCode != errNotCoordinator {
			t.Errorf("SyncGroup %s at the other broker: code %d", id, r.ErrorCode)
		}
		leave := kmsg.NewPtrLeaveGroupRequest()
		leave.Group, leave.MemberID = id, "m"
		if r := requestTo(t, c.other.addr, leave).(*kmsg.LeaveGroupResponse); r.ErrorCode != errNotCoordinator {
			t.Errorf("LeaveGroup %s at the other broker: code %d", id, r.ErrorCode)
		}
		commit := kmsg.NewPtrOffsetCommitRequest()
		commit.Version = 8 // topics by name
		commit.Group, commit.Generation = id, -1
		commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "T", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
		if r := requestTo(t, c.other.addr, commit).(*kmsg.OffsetCommitResponse); r.Topics[0].Partitions[0].ErrorCode != errNotCoordinator {
			t.Errorf("OffsetCommit %s at the other broker: %+v", id, r.Topics)
		}
		if _, ok := c.other.core.ConsumerOffset(id, "T", 0, false); ok {
			t.Errorf("the refused commit of %s was stored", id)
		}
	}

	// A consumer group coordinated by broker-b, seeded with broker-a.
	id := groupCoordinatedBy(t, a0, 10)
	pcl, err := kgo.NewClient(kgo.SeedBrokers(a0.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for p := int32(0); p < 5; p++ {
		for i := 0; i <= int(p); i++ { // partition p gets p+1 records
			if err := pcl.ProduceSync(ctx, &kgo.Record{Topic: "T", Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)}).FirstErr(); err != nil {
				t.Fatalf("produce to %d: %v", p, err)
			}
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(a0.addr), kgo.ConsumerGroup(id), kgo.ConsumeTopics("T"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := 0
	for seen < 15 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of 15: %v", seen, ctx.Err())
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch %d: %v", p, err) })
		seen += fs.NumRecords()
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	// Each offset is with its partition's queue, under the queue id.
	for _, w := range []struct {
		n    *testNode
		q    int32
		want int64
	}{{a0, 0, 1}, {a0, 1, 2}, {b0, 0, 3}, {b0, 1, 4}, {b0, 2, 5}} {
		if off, ok := w.n.core.ConsumerOffset(id, "T", w.q, false); !ok || off != w.want {
			t.Errorf("%s queue %d: offset %d %v, want %d", w.n.addr, w.q, off, ok, w.want)
		}
	}
	if _, ok := b0.core.ConsumerOffset(id, "T", 3, false); ok {
		t.Error("an offset was stored under a partition number beyond the coordinator's queues")
	}
	adm := kadm.NewClient(cl)
	offs, err := adm.FetchOffsets(ctx, id) // every topic
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 5; p++ {
		if o, ok := offs.Lookup("T", p); !ok || o.Err != nil || o.At != int64(p)+1 {
			t.Errorf("fetched offset of partition %d: %+v %v", p, o, ok)
		}
	}
	cl.Close()
	for _, w := range []struct {
		n      *testNode
		listed bool
	}{{a0, false}, {b0, true}} {
		r := requestTo(t, w.n.addr, kmsg.NewPtrListGroupsRequest()).(*kmsg.ListGroupsResponse)
		listed := false
		for _, g := range r.Groups {
			listed = listed || g.Group == id
		}
		if listed != w.listed {
			t.Errorf("%s: ListGroups %+v: %s listed %v, want %v", w.n.addr, r.Groups, id, listed, w.listed)
		}
	}

	// The other master unreachable: its partitions' commits are refused,
	// the coordinator's own taken.
	peers.mu.Lock()
	peers.down = true
	peers.mu.Unlock()
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version = 8 // topics by name
	commit.Group, commit.Generation = id, -1
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "T", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 7}, {Partition: 4, Offset: 7}}}}
	r := requestTo(t, b0.addr, commit).(*kmsg.OffsetCommitResponse)
	if c := r.Topics[0].Partitions; c[0].ErrorCode != errCoordinatorNotAvailable || c[1].ErrorCode != errNone {
		t.Errorf("commit with broker-a unreachable: %+v", c)
	}
	if off, _ := b0.core.ConsumerOffset(id, "T", 2, false); off != 7 {
		t.Errorf("the coordinator's own partition: offset %d", off)
	}
	if off, _ := a0.core.ConsumerOffset(id, "T", 0, false); off != 1 {
		t.Errorf("broker-a's partition moved to %d while unreachable", off)
	}
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Version, fetch.Group = 5, id
	fetch.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "T", Partitions: []int32{0, 4}}}
	if r := requestTo(t, b0.addr, fetch).(*kmsg.OffsetFetchResponse); r.ErrorCode != errCoordinatorNotAvailable {
		t.Errorf("fetch with broker-a unreachable: %+v", r)
	}
}

// TestCoordinatorAlone: a broker alone coordinates every group.
func TestCoordinatorAlone(t *testing.T) {
	n := startNodeWith(t, nil, Config{NodeID: 3})
	host, port, _ := net.SplitHostPort(n.addr)
	for _, id := range []string{"a", "b", "c"} {
		if r := findCoordinator(t, n.addr, id); r.ErrorCode != 0 || r.NodeID != 3 || r.Host != host || strconv.Itoa(int(r.Port)) != port {
			t.Errorf("FindCoordinator %s: %+v", id, r)
		}
	}
	if _, err := n.core.EnsureTopic("T", 1, core.PermRW); err != nil {
		t.Fatal(err)
	}
}

func (p *fakePeers) CreateTopic(ctx context.Context, addr, topic string, queues int32, attrs map[string]string) error {
	p.mu.Lock()
	onCreate := p.onCreate
	p.mu.Unlock()
	if onCreate != nil {
		onCreate(addr, topic)
	}
	n, err := p.topicNode(ctx, addr)
	if err != nil {
		return err
	}
	if _, ok := n.core.Topic(topic); ok {
		return ErrTopicExists
	}
	tc := core.NewTopicConfig(topic, queues, core.PermRW)
	for k, v := range attrs {
		tc.Attributes[k] = v
	}
	return n.core.UpdateKafkaTopic(tc)
}

func (p *fakePeers) GrowTopic(ctx context.Context, addr, topic string, queues int32) error {
	n, err := p.topicNode(ctx, addr)
	if err != nil {
		return err
	}
	tc, ok := n.core.Topic(topic)
	if !ok {
		return core.Errorf(core.ErrTopicNotFound, "no %s", topic)
	}
	tc.ReadQueueNums, tc.WriteQueueNums = queues, queues
	return n.core.UpdateKafkaTopic(tc)
}

func (p *fakePeers) DeleteTopic(_ context.Context, addr, topic string) error {
	n, err := p.node(addr)
	if err != nil {
		return err
	}
	return n.core.DeleteTopic(topic)
}

// TestClusterCoordinatorUnderACL: with access control on, the group
// requests the authorizer serves itself (OffsetCommit, OffsetFetch,
// OffsetDelete, DescribeGroups, ListGroups) answer NOT_COORDINATOR at a
// broker that does not coordinate the group, as the others do.
// CreateTopics and CreatePartitions spread over the groups, the other
// master's share asked for the client's account; refused there, the
// topic (or the new partitions) is refused with
// TOPIC_AUTHORIZATION_FAILED and broker-a's share undone.
func TestClusterCoordinatorUnderACL(t *testing.T) {
	rules, err := acl.Parse("plain_acl.yml", []byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	accounts := testAccounts{acl.NewWithRules(rules, slog.New(slog.NewTextHandler(io.Discard, nil)))}
	f := &fakeCluster{}
	peers := &fakePeers{}
	var nodes []*testNode
	for _, m := range []struct {
		group string
		id    int32
	}{{"broker-b", 10}, {"broker-a", 20}} {
		n := startNodeWith(t, nil, Config{NodeID: m.id, Group: m.group, Cluster: f, Peers: peers, ACL: accounts})
		f.add(clusterMember{group: m.group, nodeID: m.id, epoch: -1, node: n})
		nodes = append(nodes, n)
		peers.mu.Lock()
		if peers.nodes == nil {
			peers.nodes = map[string]*testNode{}
		}
		peers.nodes[n.addr] = n
		peers.mu.Unlock()
	}
	b0, a0 := nodes[0], nodes[1]
	createLocalTopic(t, a0, "orders", 1)
	createLocalTopic(t, b0, "orders", 1)
	refreshViews(a0, b0)
	id := groupCoordinatedBy(t, a0, 10)
	// Pinned to Kafka 2.8's versions: OffsetCommit v8 and OffsetFetch v7
	// name topics and one group.
	cl := saslClient(t, a0.addr, plain.Auth{User: "admin01", Pass: "admin-secret"}.AsMechanism(), kgo.MaxVersions(kversion.V2_8_0()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version = 8 // topics by name
	commit.Group, commit.Generation = id, -1
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "orders", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
	cr, err := commit.RequestWith(ctx, cl.Broker(20))
	if err != nil {
		t.Fatal(err)
	}
	if code := cr.Topics[0].Partitions[0].ErrorCode; code != errNotCoordinator {
		t.Errorf("OffsetCommit at the other broker under ACL: code %d", code)
	}
	if _, ok := a0.core.ConsumerOffset(id, "orders", 0, false); ok {
		t.Error("the commit was stored")
	}
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Version, fetch.Group = 7, id // one group, topics by name
	fetch.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "orders", Partitions: []int32{0}}}
	if fr, err := fetch.RequestWith(ctx, cl.Broker(20)); err != nil || fr.ErrorCode != errNotCoordinator {
		t.Errorf("OffsetFetch at the other broker under ACL: %+v %v", fr, err)
	}
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = id
	if r, err := od.RequestWith(ctx, cl.Broker(20)); err != nil || r.ErrorCode != errNotCoordinator {
		t.Errorf("OffsetDelete at the other broker under ACL: %+v %v", r, err)
	}
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{id}
	if r, err := dg.RequestWith(ctx, cl.Broker(20)); err != nil || len(r.Groups) != 1 || r.Groups[0].ErrorCode != errNotCoordinator {
		t.Errorf("DescribeGroups at the other broker under ACL: %+v %v", r, err)
	}

	// CreateTopics spreads under access control too, the share of
	// broker-b asked for the client's account; CreatePartitions adds the
	// new queues to broker-b the same way.
	setAdmin := func(admin func(string) bool) {
		peers.mu.Lock()
		peers.admin, peers.topicUsers = admin, nil
		peers.mu.Unlock()
	}
	users := func() []string {
		peers.mu.Lock()
		defer peers.mu.Unlock()
		return slices.Clone(peers.topicUsers)
	}
	createTopic := func(name string) kmsg.CreateTopicsResponseTopic {
		t.Helper()
		ct := kmsg.NewPtrCreateTopicsRequest()
		ct.TimeoutMillis = 5000
		ctt := kmsg.NewCreateTopicsRequestTopic()
		ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = name, 4, -1
		ct.Topics = append(ct.Topics, ctt)
		r, err := ct.RequestWith(ctx, cl.Broker(20))
		if err != nil || len(r.Topics) != 1 {
			t.Fatalf("CreateTopics %s under ACL: %+v %v", name, r, err)
		}
		return r.Topics[0]
	}
	growTopic := func(name string, count int32) int16 {
		t.Helper()
		cp := kmsg.NewPtrCreatePartitionsRequest()
		cp.TimeoutMillis = 5000
		cpt := kmsg.NewCreatePartitionsRequestTopic()
		cpt.Topic, cpt.Count = name, count
		cp.Topics = append(cp.Topics, cpt)
		r, err := cp.RequestWith(ctx, cl.Broker(20))
		if err != nil || len(r.Topics) != 1 {
			t.Fatalf("CreatePartitions %s under ACL: %+v %v", name, r, err)
		}
		return r.Topics[0].ErrorCode
	}
	queuesOf := func(n *testNode, topic string) int32 {
		tc, ok := n.core.Topic(topic)
		if !ok {
			return -1
		}
		return tc.ReadQueueNums
	}
	setAdmin(func(user string) bool { return user == "admin01" })
	if r := createTopic("spread"); r.ErrorCode != 0 || r.NumPartitions != 4 {
		t.Fatalf("CreateTopics under ACL: %+v", r)
	}
	if a, b := queuesOf(a0, "spread"), queuesOf(b0, "spread"); a != 2 || b != 2 {
		t.Errorf("spread's queues under ACL: broker-a %d, broker-b %d; want 2 and 2", a, b)
	}
	if u := users(); !slices.Equal(u, []string{"admin01"}) {
		t.Errorf("broker-b's share asked for %q, want the client's account admin01", u)
	}

	// broker-b refuses the account: the topic is refused with the
	// client's authorization error and broker-a's share undone; a
	// CreatePartitions whose queues go to broker-b is refused alike.
	setAdmin(func(string) bool { return false })
	if r := createTopic("refused"); r.ErrorCode != errTopicAuthorization || r.ErrorMessage == nil || !strings.Contains(*r.ErrorMessage, "broker-b") {
		t.Errorf("CreateTopics refused by broker-b: %+v, want TOPIC_AUTHORIZATION_FAILED naming broker-b", r)
	}
	if a, b := queuesOf(a0, "refused"), queuesOf(b0, "refused"); a != -1 || b != -1 {
		t.Errorf("a refused topic left queues: broker-a %d, broker-b %d", a, b)
	}
	if code := growTopic("spread", 6); code != errTopicAuthorization {
		t.Errorf("CreatePartitions refused by broker-b: code %d, want TOPIC_AUTHORIZATION_FAILED", code)
	}
	if b := queuesOf(b0, "spread"); b != 2 {
		t.Errorf("a refused CreatePartitions left broker-b with %d queues of spread", b)
	}
	setAdmin(func(user string) bool { return user == "admin01" })
	if code := growTopic("spread", 6); code != 0 {
		t.Errorf("CreatePartitions under ACL: code %d", code)
	}
	if a, b := queuesOf(a0, "spread"), queuesOf(b0, "spread"); a != 2 || b != 4 {
		t.Errorf("spread's queues after CreatePartitions to 6: broker-a %d, broker-b %d; want 2 and 4", a, b)
	}
	if u := users(); !slices.Equal(u, []string{"admin01"}) {
		t.Errorf("broker-b's queues asked for %q, want the client's account admin01", u)
	}
}
