package kafka

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// TestKadmElectLeadersAndReassignments: kadm's ElectLeaders answers
// ELECTION_NOT_NEEDED for existing partitions (node 0, the broker's node
// id here, is their preferred leader) and UNKNOWN_TOPIC_OR_PARTITION
// otherwise; no reassignment is listed; a reassignment away from [0] is
// refused per partition with INVALID_REPLICA_ASSIGNMENT, [0] is
// accepted, a cancellation answers
// NO_REASSIGNMENT_IN_PROGRESS.
func TestKadmElectLeadersAndReassignments(t *testing.T) {
	n := startNode(t, nil)
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "elect.me"); err != nil {
		t.Fatal(err)
	}
	for _, how := range []kadm.ElectLeadersHow{kadm.ElectPreferredReplica, kadm.ElectLiveReplica} {
		rs, err := adm.ElectLeaders(ctx, how, kadm.TopicsSet{"elect.me": {0: {}, 1: {}, 7: {}}})
		if err != nil {
			t.Fatal(err)
		}
		for p, want := range map[int32]error{0: kerr.ElectionNotNeeded, 1: kerr.ElectionNotNeeded, 7: kerr.UnknownTopicOrPartition} {
			if r := rs["elect.me"][p]; !errors.Is(r.Err, want) || r.ErrMessage == "" {
				t.Fatalf("election %d partition %d: %+v, want %v", how, p, r, want)
			}
		}
	}
	if rs, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, nil); err != nil || len(rs) != 0 {
		t.Fatalf("elect all: %v %+v, want no partition needing one", err, rs)
	}

	ls, err := adm.ListPartitionReassignments(ctx, nil)
	if err != nil || len(ls) != 0 {
		t.Fatalf("list reassignments: %v %+v", err, ls)
	}
	if ls, err = adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"elect.me": {0: {}}}); err != nil || len(ls) != 0 {
		t.Fatalf("list reassignments of elect.me: %v %+v", err, ls)
	}

	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("elect.me", 0, []int32{1})
	req.Assign("elect.me", 1, []int32{0})
	req.CancelAssign("elect.me", 2) // no such partition
	req.Assign("absent.topic", 0, []int32{0})
	as, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r := as["elect.me"][0]; !errors.Is(r.Err, kerr.InvalidReplicaAssignment) || !strings.Contains(r.ErrMessage, "nodes [0]") {
		t.Fatalf("reassign to [1]: %+v", r)
	}
	if r := as["elect.me"][1]; r.Err != nil {
		t.Fatalf("reassign to its own [0]: %+v", r)
	}
	if r := as["elect.me"][2]; !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("cancel on an unknown partition: %+v", r)
	}
	if r := as["absent.topic"][0]; !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("unknown topic: %+v", r)
	}
	req = nil
	req.CancelAssign("elect.me", 0)
	if as, err = adm.AlterPartitionAssignments(ctx, req); err != nil || !errors.Is(as["elect.me"][0].Err, kerr.NoReassignmentInProgress) {
		t.Fatalf("cancel: %v %+v", err, as)
	}
}

// TestReplicaAPIsNeedAdmin: under access control ElectLeaders and the
// reassignment APIs need an admin account.
func TestReplicaAPIsNeedAdmin(t *testing.T) {
	n := startACLNode(t)
	ctx := ctx30(t)
	user := kadm.NewClient(saslClient(t, n.addr, plain.Auth{User: "producer1", Pass: "producer-secret"}.AsMechanism()))
	admin := kadm.NewClient(saslClient(t, n.addr, plain.Auth{User: "admin01", Pass: "admin-secret"}.AsMechanism()))
	if _, err := admin.CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	set := kadm.TopicsSet{"orders": {0: {}}}
	var ae *kadm.AuthError
	if _, err := user.ElectLeaders(ctx, kadm.ElectPreferredReplica, set); !errors.As(err, &ae) {
		t.Fatalf("elect as a user: %v", err)
	}
	if _, err := user.ListPartitionReassignments(ctx, set); !errors.As(err, &ae) {
		t.Fatalf("list reassignments as a user: %v", err)
	}
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("orders", 0, []int32{0})
	if _, err := user.AlterPartitionAssignments(ctx, req); !errors.As(err, &ae) {
		t.Fatalf("reassign as a user: %v", err)
	}
	rs, err := admin.ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
	if err != nil || !errors.Is(rs["orders"][0].Err, kerr.ElectionNotNeeded) {
		t.Fatalf("elect as admin: %v %+v", err, rs)
	}
}

// TestElectLeadersNamesTheGroupsLeader: the answers name each partition's
// real leader, the node id of its group's master (not node 0): on a
// broker alone with kafkaNodeId 7, and over a cluster of two groups,
// where a partition of the other group names that group's master, and a
// group without a master answers PREFERRED_LEADER_NOT_AVAILABLE (or
// ELIGIBLE_LEADERS_NOT_AVAILABLE for an unclean election). A partition's
// replicas as Metadata lists them are its accepted assignment.
func TestElectLeadersNamesTheGroupsLeader(t *testing.T) {
	alone := startNodeWith(t, nil, Config{NodeID: 7})
	_, adm := adminClient(t, alone.addr)
	ctx := ctx30(t)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "alone"); err != nil {
		t.Fatal(err)
	}
	rs, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"alone": {0: {}}})
	if r := rs["alone"][0]; err != nil || !errors.Is(r.Err, kerr.ElectionNotNeeded) || !strings.Contains(r.ErrMessage, "node 7,") {
		t.Fatalf("alone: %v %+v", err, r)
	}
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("alone", 0, []int32{7})
	if as, err := adm.AlterPartitionAssignments(ctx, req); err != nil || as["alone"][0].Err != nil {
		t.Fatalf("its own replicas [7]: %v %+v", err, as)
	}
	req = nil
	req.Assign("alone", 0, []int32{0})
	if as, err := adm.AlterPartitionAssignments(ctx, req); err != nil || !errors.Is(as["alone"][0].Err, kerr.InvalidReplicaAssignment) {
		t.Fatalf("replicas [0] on node 7: %v %+v", err, as)
	}

	f := &fakeCluster{}
	a0 := startClusterNode(t, f, "broker-a", 0, 20)
	b0 := startNodeWith(t, nil, Config{NodeID: 10, Group: "broker-b", Cluster: f})
	f.add(clusterMember{group: "broker-b", nodeID: 10, epoch: 3, node: b0})
	f.add(clusterMember{group: "broker-b", brokerID: 1, nodeID: 11, epoch: 3, node: b0})
	createLocalTopic(t, a0, "T", 1)
	createLocalTopic(t, b0, "T", 1)
	refreshViews(a0, b0)
	_, adm = adminClient(t, a0.addr)
	rs, err = adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"T": {0: {}, 1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	// Partitions follow the groups in name order: 0 is broker-a's, 1 broker-b's.
	for p, want := range map[int32]string{0: "node 20,", 1: "node 10,"} {
		if r := rs["T"][p]; !errors.Is(r.Err, kerr.ElectionNotNeeded) || !strings.Contains(r.ErrMessage, want) {
			t.Errorf("partition %d: %+v, want a message naming %s", p, r, want)
		}
	}
	req = nil
	req.Assign("T", 1, []int32{10, 11})
	if as, err := adm.AlterPartitionAssignments(ctx, req); err != nil || as["T"][1].Err != nil {
		t.Fatalf("broker-b's own replicas [10 11]: %v %+v", err, as)
	}
	// broker-b loses its master: only its slave is listed (the
	// NameServer keeps the topic's queues of broker-b).
	f.mu.Lock()
	f.members = slices.DeleteFunc(f.members, func(m clusterMember) bool { return m.group == "broker-b" && m.brokerID == 0 })
	f.kept = map[string][]TopicGroup{"T": {{Group: "broker-b", Queues: 1}}}
	f.mu.Unlock()
	refreshViews(a0)
	// Asked of broker-a's node itself (clients send ElectLeaders to the
	// lowest node id, broker-b's, which still runs here).
	cl, err := kgo.NewClient(kgo.SeedBrokers(a0.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for typ, want := range map[int8]int16{0: errPreferredLeaderNotAvailable, 1: errEligibleLeadersNotAvailable} {
		req := kmsg.NewPtrElectLeadersRequest()
		req.ElectionType, req.TimeoutMillis = typ, 5000
		rt := kmsg.NewElectLeadersRequestTopic()
		rt.Topic, rt.Partitions = "T", []int32{1}
		req.Topics = append(req.Topics, rt)
		resp, err := cl.Broker(20).Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		r := resp.(*kmsg.ElectLeadersResponse)
		if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 || r.Topics[0].Partitions[0].ErrorCode != want {
			t.Errorf("election type %d without a master: %+v, want error %d", typ, r.Topics, want)
		}
	}
}
