package kafka

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClusterReplacedMaster: a master that learns of a newer master of
// its group (Config.Replaced) leads nothing from then on: Produce, Fetch
// and ListOffsets answer NOT_LEADER_OR_FOLLOWER, and its Metadata names
// the new master (another node id, the new epoch as registered) as the
// leader, itself a replica.
func TestClusterReplacedMaster(t *testing.T) {
	f := &fakeCluster{}
	var replaced atomic.Bool
	var epoch atomic.Int32
	epoch.Store(3)
	old := startNodeWith(t, nil, Config{NodeID: 1, Group: "broker-a", Cluster: f, Replaced: replaced.Load,
		LocalGroup: func() LocalGroup { return LocalGroup{Epoch: epoch.Load(), InSync: []int64{0}} }})
	f.add(clusterMember{group: "broker-a", nodeID: 1, epoch: 3, node: old})
	createLocalTopic(t, old, "T", 1)
	refreshViews(old)
	if code := rawProduce(t, old.addr, "T", 0); code != errNone {
		t.Fatalf("produce to the master: code %d", code)
	}

	// Replaced: the new master (node 2) registered as brokerId 0 at epoch 4.
	replaced.Store(true)
	f.mu.Lock()
	f.members[0].brokerID = 5 // the old master's registration is a replica's now
	f.mu.Unlock()
	f.add(clusterMember{group: "broker-a", nodeID: 2, epoch: 4, node: old})
	refreshViews(old)
	if code := rawProduce(t, old.addr, "T", 0); code != errNotLeaderOrFollower {
		t.Errorf("produce to the replaced master: code %d, want NOT_LEADER_OR_FOLLOWER", code)
	}
	if code := rawFetch(t, old.addr, "T", 0); code != errNotLeaderOrFollower {
		t.Errorf("fetch from the replaced master: code %d, want NOT_LEADER_OR_FOLLOWER", code)
	}
	if code, _ := rawListLatest(t, old.addr, "T", 0); code != errNotLeaderOrFollower {
		t.Errorf("list offsets on the replaced master: code %d, want NOT_LEADER_OR_FOLLOWER", code)
	}
	m := metadataOf(t, old.addr, "T")
	if len(m.Topics) != 1 || len(m.Topics[0].Partitions) != 1 {
		t.Fatalf("%+v", m.Topics)
	}
	if p := m.Topics[0].Partitions[0]; p.Leader != 2 || p.LeaderEpoch != 4 {
		t.Errorf("replaced master's Metadata: %+v, want leader 2 at epoch 4", p)
	}
}

// TestLeaderEpochChecked: Fetch v9+ and ListOffsets v4+ with a
// CurrentLeaderEpoch older than the leader's answer FENCED_LEADER_EPOCH,
// newer UNKNOWN_LEADER_EPOCH, equal or -1 (not given) serve.
func TestLeaderEpochChecked(t *testing.T) {
	f := &fakeCluster{}
	n := startNodeWith(t, nil, Config{NodeID: 0, Group: "broker-a", Cluster: f,
		LocalGroup: func() LocalGroup { return LocalGroup{Epoch: 5, InSync: []int64{0}} }})
	f.add(clusterMember{group: "broker-a", nodeID: 0, epoch: 5, node: n})
	createLocalTopic(t, n, "T", 1)
	refreshViews(n)
	for _, c := range []struct {
		current int32
		want    int16
	}{{-1, errNone}, {5, errNone}, {4, errFencedLeaderEpoch}, {6, errUnknownLeaderEpoch}} {
		freq := kmsg.NewPtrFetchRequest()
		freq.Version, freq.MaxBytes = 12, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "T"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = 1<<20, c.current, -1
		ft.Partitions = append(ft.Partitions, fp)
		freq.Topics = append(freq.Topics, ft)
		fresp := dialRaw(t, n.addr).do(freq, 12).(*kmsg.FetchResponse)
		if got := fresp.Topics[0].Partitions[0].ErrorCode; got != c.want {
			t.Errorf("fetch with current leader epoch %d: code %d, want %d", c.current, got, c.want)
		}

		lreq := kmsg.NewPtrListOffsetsRequest()
		lreq.ReplicaID = -1
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "T"
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Timestamp, lp.CurrentLeaderEpoch = -1, c.current
		lt.Partitions = append(lt.Partitions, lp)
		lreq.Topics = append(lreq.Topics, lt)
		lresp := dialRaw(t, n.addr).do(lreq, 7).(*kmsg.ListOffsetsResponse)
		lpart := lresp.Topics[0].Partitions[0]
		if lpart.ErrorCode != c.want {
			t.Errorf("list offsets with current leader epoch %d: code %d, want %d", c.current, lpart.ErrorCode, c.want)
		}
		if c.want == errNone && lpart.LeaderEpoch != 5 {
			t.Errorf("list offsets answers leader epoch %d, want 5", lpart.LeaderEpoch)
		}
	}
	// Fetch v8 has no CurrentLeaderEpoch: never checked.
	if got := fetchWithEpoch(t, n.addr, 8, 0); got != errNone {
		t.Errorf("fetch v8: code %d, want none", got)
	}
	// A broker alone answers Metadata with leader epoch 0, so it checks
	// none (its replication epoch is not what clients were told).
	alone := startNodeWith(t, nil, Config{LocalGroup: func() LocalGroup { return LocalGroup{Epoch: 5, InSync: []int64{0}} }})
	createLocalTopic(t, alone, "T", 1)
	if got := fetchWithEpoch(t, alone.addr, 12, 0); got != errNone {
		t.Errorf("fetch v12 with epoch 0 from a broker alone: code %d, want none", got)
	}
}

func fetchWithEpoch(t *testing.T, addr string, version int16, current int32) int16 {
	t.Helper()
	freq := kmsg.NewPtrFetchRequest()
	freq.Version, freq.MaxBytes = version, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "T"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = 1<<20, current, -1
	ft.Partitions = append(ft.Partitions, fp)
	freq.Topics = append(freq.Topics, ft)
	return dialRaw(t, addr).do(freq, version).(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode
}

// TestFindCoordinatorNamesItsNode: the coordinator a broker names is
// itself by its own node id (a member of a cluster, or in controller mode,
// is not node 0).
func TestFindCoordinatorNamesItsNode(t *testing.T) {
	n := startNodeWith(t, nil, Config{NodeID: 7})
	for _, v := range []int16{3, 4} {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey, req.CoordinatorKeys = "g", []string{"g"}
		resp := dialRaw(t, n.addr).do(req, v).(*kmsg.FindCoordinatorResponse)
		node := resp.NodeID
		if v >= 4 {
			node = resp.Coordinators[0].NodeID
		}
		if node != 7 {
			t.Errorf("FindCoordinator v%d names node %d, want 7", v, node)
		}
	}
}

// TestReplacedMasterAnswersInFlight: a produce waiting for its
// confirmation when the master is replaced and its door closes (a role
// change in controller mode) is answered NOT_LEADER_OR_FOLLOWER, so its
// client retries at the new leader, rather than see its connection
// broken; Close then takes no further request.
func TestReplacedMasterAnswersInFlight(t *testing.T) {
	var replaced atomic.Bool
	// ExternalReplication with no replication: a put is never confirmed.
	n := startNodeStore(t, nil, Config{NodeID: 1, Replaced: replaced.Load}, func(c *store.Config) { c.ExternalReplication = true })
	createLocalTopic(t, n, "T", 1)
	c, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	req := produceReq(-1, "T", testBatch(1, 0))
	req.TimeoutMillis = 15000
	written := n.st.Offset(store.Written)
	if _, err := c.Write(frameOf(req, 9, 1)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the record written, waiting for its confirmation", func() bool {
		return n.st.Offset(store.Written) > written
	})
	replaced.Store(true)
	closed := make(chan struct{})
	go func() { n.srv.Close(); close(closed) }()
	r := bufio.NewReader(c)
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		t.Fatalf("the in-flight produce got no answer: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(h[:])-4)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	resp.SetVersion(9)
	if err := resp.ReadFrom(body[1:]); err != nil { // v9 is flexible: a header tag byte
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != errNotLeaderOrFollower {
		t.Errorf("in-flight produce at a replaced master's close: code %d, want NOT_LEADER_OR_FOLLOWER", code)
	}
	<-closed
	// The connection takes nothing more.
	c.Write(frameOf(kmsg.NewPtrApiVersionsRequest(), 3, 2))
	if _, err := io.ReadFull(r, h[:]); err == nil {
		t.Error("a request after Close was answered")
	}
}
