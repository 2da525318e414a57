package kafka

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinReq is a JoinGroup of group g for a consumer offering "range".
func joinReq(g, memberID, instance string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID, req.ProtocolType = g, memberID, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30000, 20000
	if instance != "" {
		req.InstanceID = kmsg.StringPtr(instance)
	}
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte("meta-" + instance)}}
	return req
}

func heartbeatCode(rc *rawConn, g, memberID, instance string, gen int32) int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = g, memberID, gen
	if instance != "" {
		req.InstanceID = kmsg.StringPtr(instance)
	}
	return rc.do(req, 4).(*kmsg.HeartbeatResponse).ErrorCode
}

// TestStaticMemberRejoinsWithoutRebalance: a static member (instance id)
// gets a member id at its first join; when the instance restarts (joins
// again without a member id) it gets a new member id in the same
// generation and its assignment back, and the other member sees no
// rebalance; its old member id is fenced; LeaveGroup by instance id
// removes it; instance ids are echoed in JoinGroup, LeaveGroup and
// DescribeGroups.
func TestStaticMemberRejoinsWithoutRebalance(t *testing.T) {
	// The delay lets both members into the first generation.
	n := startNodeWith(t, nil, Config{InitialRebalanceDelay: 2 * time.Second})
	a, b := dialRaw(t, n.addr), dialRaw(t, n.addr)
	const g = "static-g"
	// Both join: a first (no MEMBER_ID_REQUIRED for a static member), then b.
	jaCh := make(chan *kmsg.JoinGroupResponse, 1)
	go func() { jaCh <- a.do(joinReq(g, "", "inst-a"), 9).(*kmsg.JoinGroupResponse) }()
	jb := waitJoin(t, b, joinReq(g, "", "inst-b"))
	ja := <-jaCh
	if ja.ErrorCode != 0 || jb.ErrorCode != 0 || ja.Generation != jb.Generation {
		t.Fatalf("joins: a %d gen %d, b %d gen %d", ja.ErrorCode, ja.Generation, jb.ErrorCode, jb.Generation)
	}
	gen := ja.Generation
	leader, follower, lconn, fconn, finst := ja, jb, a, b, "inst-b"
	if jb.MemberID == jb.LeaderID {
		leader, follower, lconn, fconn, finst = jb, ja, b, a, "inst-a"
	}
	insts := map[string]bool{}
	for _, m := range leader.Members {
		insts[deref(m.InstanceID)] = true
	}
	if !insts["inst-a"] || !insts["inst-b"] {
		t.Fatalf("the leader's member list does not carry the instance ids: %+v", leader.Members)
	}
	sync := func(rc *rawConn, id, inst string, gen int32, assign map[string]string) (int16, string) {
		req := kmsg.NewPtrSyncGroupRequest()
		req.Group, req.MemberID, req.Generation = g, id, gen
		req.InstanceID = kmsg.StringPtr(inst)
		for m, as := range assign {
			req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: m, MemberAssignment: []byte(as)})
		}
		r := rc.do(req, 5).(*kmsg.SyncGroupResponse)
		return r.ErrorCode, string(r.MemberAssignment)
	}
	linst := "inst-a"
	if finst == "inst-a" {
		linst = "inst-b"
	}
	fsync := make(chan string, 1)
	go func() { _, as := sync(fconn, follower.MemberID, finst, gen, nil); fsync <- as }()
	if code, as := sync(lconn, leader.MemberID, linst, gen, map[string]string{leader.MemberID: "L", follower.MemberID: "F"}); code != 0 || as != "L" {
		t.Fatalf("leader sync: %d %q", code, as)
	}
	if as := <-fsync; as != "F" {
		t.Fatalf("follower's assignment %q", as)
	}
	// The follower's instance restarts on a new connection.
	restarted := dialRaw(t, n.addr)
	rj := restarted.do(joinReq(g, "", finst), 9).(*kmsg.JoinGroupResponse)
	if rj.ErrorCode != 0 || rj.Generation != gen || rj.MemberID == follower.MemberID || rj.LeaderID != leader.MemberID {
		t.Fatalf("static rejoin: code %d gen %d (want %d) member %q (old %q) leader %q", rj.ErrorCode, rj.Generation, gen, rj.MemberID, follower.MemberID, rj.LeaderID)
	}
	if code, as := sync(restarted, rj.MemberID, finst, gen, nil); code != 0 || as != "F" {
		t.Fatalf("restarted member's sync: %d %q, want its assignment F back", code, as)
	}
	if code := heartbeatCode(lconn, g, leader.MemberID, linst, gen); code != 0 {
		t.Fatalf("the other member's heartbeat after the static rejoin: code %d, want 0 (no rebalance)", code)
	}
	if code := heartbeatCode(fconn, g, follower.MemberID, finst, gen); code != errFencedInstanceID {
		t.Fatalf("the replaced member id's heartbeat: code %d, want FENCED_INSTANCE_ID", code)
	}
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = g
	leave.Members = []kmsg.LeaveGroupRequestMember{{InstanceID: kmsg.StringPtr(finst)}}
	lr := restarted.do(leave, 4).(*kmsg.LeaveGroupResponse)
	if len(lr.Members) != 1 || lr.Members[0].ErrorCode != 0 || deref(lr.Members[0].InstanceID) != finst {
		t.Fatalf("leave by instance id: %+v", lr.Members)
	}
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{g}
	desc := a.do(dg, 5).(*kmsg.DescribeGroupsResponse).Groups[0]
	if len(desc.Members) != 1 || deref(desc.Members[0].InstanceID) != linst {
		t.Fatalf("after the leave: members %+v, want only %s", desc.Members, linst)
	}
}

// waitJoin sends a JoinGroup once the other member's join is in (it is
// sent first on its own connection) and returns the answer.
func waitJoin(t *testing.T, rc *rawConn, req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	t.Helper()
	return rc.do(req, 9).(*kmsg.JoinGroupResponse)
}

// TestInitialRebalanceDelay: with a delay, two members that start
// together share the first generation instead of the first one taking
// everything alone.
func TestInitialRebalanceDelay(t *testing.T) {
	n := startNodeWith(t, nil, Config{InitialRebalanceDelay: 3 * time.Second})
	a, b := dialRaw(t, n.addr), dialRaw(t, n.addr)
	first := make(chan *kmsg.JoinGroupResponse, 1)
	go func() { first <- a.do(joinReq("delayed", "", "one"), 9).(*kmsg.JoinGroupResponse) }()
	jb := b.do(joinReq("delayed", "", "two"), 9).(*kmsg.JoinGroupResponse)
	ja := <-first
	if ja.ErrorCode != 0 || jb.ErrorCode != 0 {
		t.Fatalf("codes %d %d", ja.ErrorCode, jb.ErrorCode)
	}
	if ja.Generation != 1 || jb.Generation != 1 {
		t.Fatalf("generations %d and %d, want both 1", ja.Generation, jb.Generation)
	}
	leader := ja
	if jb.MemberID == jb.LeaderID {
		leader = jb
	}
	if len(leader.Members) != 2 {
		t.Fatalf("the first generation has %d members, want 2", len(leader.Members))
	}
}

// TestKgoStaticMemberKeepsPartitions: franz-go consumers with instance
// ids; one is closed and started again under its instance id and gets
// the same partitions in the same generation.
func TestKgoStaticMemberKeepsPartitions(t *testing.T) {
	n := startNode(t, nil)
	if _, err := n.core.EnsureTopic("st", 4, 6); err != nil {
		t.Fatal(err)
	}
	start := func(inst string) (*kgo.Client, chan map[string][]int32) {
		assigned := make(chan map[string][]int32, 4)
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.ConsumerGroup("st-g"), kgo.ConsumeTopics("st"),
			kgo.InstanceID(inst), kgo.Balancers(kgo.RangeBalancer()),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { assigned <- m }))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for !cl.PollFetches(context.Background()).IsClientClosed() {
			}
		}()
		return cl, assigned
	}
	first, _ := start("k1")
	defer first.Close()
	second, got := start("k2")
	var before map[string][]int32
	deadline := time.After(30 * time.Second)
	for len(before["st"]) != 2 { // the group settled on 2+2 partitions
		select {
		case before = <-got:
		case <-deadline:
			t.Fatalf("k2 never got 2 partitions: %v", before)
		}
	}
	gen := generationOf(n, "st-g")
	second.Close() // a static member does not leave on close
	again, got2 := start("k2")
	defer again.Close()
	select {
	case after := <-got2:
		if fmtParts(after) != fmtParts(before) {
			t.Fatalf("restarted static member got %v, had %v", after, before)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the restarted static member got no assignment")
	}
	if g2 := generationOf(n, "st-g"); g2 != gen {
		t.Fatalf("generation %d after the static restart, was %d: it rebalanced", g2, gen)
	}
}

// generationOf is the coordinator's generation of group g.
func generationOf(n *testNode, g string) int32 {
	n.srv.gmu.Lock()
	defer n.srv.gmu.Unlock()
	if grp := n.srv.groups[g]; grp != nil {
		return grp.generation
	}
	return -1
}

func fmtParts(m map[string][]int32) string {
	out := ""
	for _, t := range slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}) {
		ps := slices.Clone(m[t])
		slices.Sort(ps)
		out += fmt.Sprint(t, ps)
	}
	return out
}
