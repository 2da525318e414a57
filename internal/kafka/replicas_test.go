package kafka

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// TestKadmElectLeadersAndReassignments: kadm's ElectLeaders answers
// ELECTION_NOT_NEEDED for existing partitions (node 0 is their preferred
// leader) and UNKNOWN_TOPIC_OR_PARTITION otherwise; no reassignment is
// listed; a reassignment away from [0] is refused per partition with
// INVALID_REPLICA_ASSIGNMENT, [0] is accepted, a cancellation answers
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
	if r := as["elect.me"][0]; !errors.Is(r.Err, kerr.InvalidReplicaAssignment) || r.ErrMessage != msgReassignmentNotSupported {
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
