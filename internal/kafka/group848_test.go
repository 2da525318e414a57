package kafka

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// cgTest is a node with topics t4 (4 partitions) and t2 (2), driven by
// kmsg requests handed to its server.
type cgTest struct {
	t *testing.T
	n *testNode
}

func newCGTest(t *testing.T) *cgTest {
	t.Helper()
	n := startNode(t, nil)
	req := kmsg.NewPtrCreateTopicsRequest()
	for name, parts := range map[string]int32{"t4": 4, "t2": 2} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, parts, 1
		req.Topics = append(req.Topics, rt)
	}
	for _, rt := range n.srv.createTopics(req, "").(*kmsg.CreateTopicsResponse).Topics {
		if rt.ErrorCode != 0 {
			t.Fatalf("create %s: %d", rt.Topic, rt.ErrorCode)
		}
	}
	return &cgTest{t: t, n: n}
}

// join is an epoch-0 heartbeat subscribing to topics.
func join(member string, topics ...string) *kmsg.ConsumerGroupHeartbeatRequest {
	req := hb(member, 0, nil)
	req.RebalanceTimeoutMillis = 30000
	req.SubscribedTopicNames = topics
	req.ServerAssignor = kmsg.StringPtr(assignorUniform)
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	return req
}

// hb is a heartbeat of member at epoch; owned nil is "unchanged".
func hb(member string, epoch int32, owned map[string][]int32) *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version, req.Group, req.MemberID, req.MemberEpoch = 1, "cg", member, epoch
	if owned != nil {
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		for _, topic := range slices.Sorted(maps.Keys(owned)) {
			req.Topics = append(req.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: topicID(topic), Partitions: owned[topic]})
		}
	}
	return req
}

func (c *cgTest) send(req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	c.t.Helper()
	resp := c.n.srv.consumerGroupHeartbeat(req, "client", "127.0.0.1").(*kmsg.ConsumerGroupHeartbeatResponse)
	c.checkExclusive()
	return resp
}

// ok sends req and fails unless it succeeds; it returns the answer's
// assignment (nil: none sent) and epoch.
func (c *cgTest) ok(req *kmsg.ConsumerGroupHeartbeatRequest) (map[string][]int32, int32) {
	c.t.Helper()
	resp := c.send(req)
	if resp.ErrorCode != 0 {
		c.t.Fatalf("heartbeat of %s at %d: error %d %s", req.MemberID, req.MemberEpoch, resp.ErrorCode, deref(resp.ErrorMessage))
	}
	if resp.Assignment == nil {
		return nil, resp.MemberEpoch
	}
	names := map[[16]byte]string{topicID("t4"): "t4", topicID("t2"): "t2"}
	out := map[string][]int32{}
	for _, t := range resp.Assignment.Topics {
		out[names[t.TopicID]] = t.Partitions
	}
	return out, resp.MemberEpoch
}

func (c *cgTest) code(req *kmsg.ConsumerGroupHeartbeatRequest) int16 {
	c.t.Helper()
	return c.send(req).ErrorCode
}

// checkExclusive fails when a partition is owned (assigned or being
// revoked) by two members, or the owner table disagrees.
func (c *cgTest) checkExclusive() {
	c.t.Helper()
	s := c.n.srv
	s.gmu.Lock()
	defer s.gmu.Unlock()
	for _, g := range s.cg.groups {
		seen := map[tpKey]string{}
		for id, m := range g.members {
			for _, set := range []map[tpKey]int32{m.assigned, m.revoking} {
				for k := range set {
					if other, ok := seen[k]; ok {
						c.t.Fatalf("partition %v owned by %s and %s", k, other, id)
					}
					seen[k] = id
					if g.owners[k] != id {
						c.t.Fatalf("partition %v: owner table says %q, member %s owns it", k, g.owners[k], id)
					}
				}
			}
		}
		if len(seen) != len(g.owners) {
			c.t.Fatalf("owner table has %d partitions, members own %d", len(g.owners), len(seen))
		}
	}
}

func count(a map[string][]int32) int {
	n := 0
	for _, ps := range a {
		n += len(ps)
	}
	return n
}

// TestConsumerGroupRevokeBeforeReassign: the first member gets every
// partition; when a second joins, the first is told to keep half (its
// epoch unchanged) and the second gets nothing of it until the first
// reports it no longer owns the other half; then both are at the new
// epoch with two partitions each. No partition is ever owned twice.
func TestConsumerGroupRevokeBeforeReassign(t *testing.T) {
	c := newCGTest(t)
	a, ea := c.ok(join("A", "t4"))
	if count(a) != 4 || ea != 1 {
		t.Fatalf("first member: %v at epoch %d, want t4 0-3 at 1", a, ea)
	}
	if got, _ := c.ok(hb("A", ea, nil)); got != nil {
		t.Fatalf("a keepalive without changes got an assignment: %v", got)
	}
	b, eb := c.ok(join("B", "t4"))
	if count(b) != 0 || eb != 2 {
		t.Fatalf("second member: %v at epoch %d, want nothing yet at epoch 2", b, eb)
	}
	keep, e := c.ok(hb("A", ea, nil))
	if count(keep) != 2 || e != ea {
		t.Fatalf("first member told %v at %d, want 2 partitions at its epoch %d", keep, e, ea)
	}
	if got, _ := c.ok(hb("B", eb, map[string][]int32{})); count(got) != 0 {
		t.Fatalf("second member got %v while the first still owns it", got)
	}
	// Still reporting all four: nothing is released.
	c.ok(hb("A", ea, a))
	if got, _ := c.ok(hb("B", eb, map[string][]int32{})); count(got) != 0 {
		t.Fatalf("second member got %v before the revocation was reported", got)
	}
	got, e := c.ok(hb("A", ea, keep))
	if e != 2 || count(got) != 2 {
		t.Fatalf("after revoking: %v at %d, want 2 partitions at epoch 2", got, e)
	}
	b, eb = c.ok(hb("B", eb, map[string][]int32{}))
	if count(b) != 2 || eb != 2 {
		t.Fatalf("second member then got %v at %d, want 2 partitions at 2", b, eb)
	}
	for _, p := range b["t4"] {
		if slices.Contains(keep["t4"], p) {
			t.Fatalf("partition %d given to both: %v and %v", p, keep, b)
		}
	}
	c.n.srv.gmu.Lock()
	st := c.n.srv.cg.groups["cg"].state()
	c.n.srv.gmu.Unlock()
	if st != "Stable" {
		t.Fatalf("group state %s, want Stable", st)
	}
}

// TestConsumerGroupEpochFencing: an epoch above the member's is fenced, a
// previous epoch passes only with partitions the member holds (a lost
// answer), an unknown member id is UNKNOWN_MEMBER_ID, and malformed joins
// are refused as Kafka refuses them.
func TestConsumerGroupEpochFencing(t *testing.T) {
	c := newCGTest(t)
	a, ea := c.ok(join("A", "t4"))
	c.ok(join("B", "t4"))
	keep, _ := c.ok(hb("A", ea, nil))
	_, ea2 := c.ok(hb("A", ea, keep))
	if ea2 != 2 {
		t.Fatalf("epoch %d, want 2", ea2)
	}
	for _, tc := range []struct {
		name string
		req  *kmsg.ConsumerGroupHeartbeatRequest
		want int16
	}{
		{"epoch above", hb("A", ea2+1, keep), errFencedMemberEpoch},
		{"previous epoch, keepalive", hb("A", ea, nil), errFencedMemberEpoch},
		{"previous epoch, partitions it no longer holds", hb("A", ea, a), errFencedMemberEpoch},
		{"previous epoch, partitions it holds", hb("A", ea, keep), errNone},
		{"unknown member", hb("nobody", 1, nil), errUnknownMemberID},
		{"join owning partitions", func() *kmsg.ConsumerGroupHeartbeatRequest {
			r := join("C", "t4")
			r.Topics = hb("C", 0, a).Topics
			return r
		}(), errInvalidRequest},
		{"join with owned partitions null", func() *kmsg.ConsumerGroupHeartbeatRequest {
			r := join("C", "t4")
			r.Topics = nil
			return r
		}(), errInvalidRequest},
		{"empty group id", func() *kmsg.ConsumerGroupHeartbeatRequest {
			r := join("C", "t4")
			r.Group = ""
			return r
		}(), errInvalidRequest},
		{"join without subscription", func() *kmsg.ConsumerGroupHeartbeatRequest { r := join("C"); r.SubscribedTopicNames = nil; return r }(), errInvalidRequest},
		{"join without rebalance timeout", func() *kmsg.ConsumerGroupHeartbeatRequest {
			r := join("C", "t4")
			r.RebalanceTimeoutMillis = -1
			return r
		}(), errInvalidRequest},
		{"unknown assignor", func() *kmsg.ConsumerGroupHeartbeatRequest {
			r := join("C", "t4")
			r.ServerAssignor = kmsg.StringPtr("sticky")
			return r
		}(), errUnsupportedAssignor},
		{"bad regex", func() *kmsg.ConsumerGroupHeartbeatRequest {
			r := join("C")
			r.SubscribedTopicNames, r.SubscribedTopicRegex = nil, kmsg.StringPtr("t(")
			return r
		}(), errInvalidRegex},
		{"empty member id", hb("", 1, nil), errInvalidRequest},
		{"too many topics", func() *kmsg.ConsumerGroupHeartbeatRequest {
			r := join("C")
			for i := 0; i <= maxSubscribedTopicNames; i++ {
				r.SubscribedTopicNames = append(r.SubscribedTopicNames, fmt.Sprintf("t%d", i))
			}
			return r
		}(), errInvalidRequest},
		{"static leave of a dynamic member", hb("A", -2, nil), errInvalidRequest},
	} {
		if got := c.code(tc.req); got != tc.want {
			t.Errorf("%s: error %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestConsumerGroupLeave: a member leaving with epoch -1 frees its
// partitions at once (the other gets them at its next heartbeat, at a new
// epoch), and its heartbeats then are UNKNOWN_MEMBER_ID; a rejoin at epoch
// 0 with a known member id gets its assignment again.
func TestConsumerGroupLeave(t *testing.T) {
	c := newCGTest(t)
	_, ea := c.ok(join("A", "t4"))
	c.ok(join("B", "t4"))
	keep, _ := c.ok(hb("A", ea, nil))
	_, ea = c.ok(hb("A", ea, keep))
	b, eb := c.ok(hb("B", 2, map[string][]int32{}))
	if count(b) != 2 {
		t.Fatalf("B got %v", b)
	}
	// A lost its answer and rejoins with its member id: same partitions.
	again, e := c.ok(join("A", "t4"))
	if e != ea || !maps.EqualFunc(again, keep, slices.Equal) {
		t.Fatalf("rejoin in place: %v at %d, want %v at %d", again, e, keep, ea)
	}
	if resp := c.send(hb("B", -1, nil)); resp.ErrorCode != 0 || resp.MemberEpoch != -1 {
		t.Fatalf("leave: error %d epoch %d", resp.ErrorCode, resp.MemberEpoch)
	}
	if code := c.code(hb("B", eb, nil)); code != errUnknownMemberID {
		t.Fatalf("heartbeat after leaving: %d, want UNKNOWN_MEMBER_ID", code)
	}
	all, e := c.ok(hb("A", ea, keep))
	if count(all) != 4 || e <= ea {
		t.Fatalf("after B left A has %v at %d, want all 4 at an epoch above %d", all, e, ea)
	}
}

// TestConsumerGroupStaticMember: a static member leaving with -2 keeps its
// partitions (no rebalance); a new member id with its instance id takes
// its place, epoch and partitions; the instance id is refused to another
// join while held (UNRELEASED_INSTANCE_ID); a -2 member whose session
// times out is removed and its partitions go to the others.
func TestConsumerGroupStaticMember(t *testing.T) {
	c := newCGTest(t)
	ja := join("A", "t4")
	ja.InstanceID = kmsg.StringPtr("inst")
	_, ea := c.ok(ja)
	_, eb := c.ok(join("B", "t4"))
	keep, _ := c.ok(hb("A", ea, nil))
	_, ea = c.ok(hb("A", ea, keep))
	c.ok(hb("B", eb, map[string][]int32{}))
	leave := hb("A", -2, nil)
	leave.InstanceID = kmsg.StringPtr("inst")
	if resp := c.send(leave); resp.ErrorCode != 0 || resp.MemberEpoch != -2 {
		t.Fatalf("static leave: %d epoch %d", resp.ErrorCode, resp.MemberEpoch)
	}
	c.n.srv.gmu.Lock()
	groupEpoch := c.n.srv.cg.groups["cg"].epoch
	c.n.srv.gmu.Unlock()
	if got, _ := c.ok(hb("B", eb, nil)); got != nil {
		t.Fatalf("B got %v while the static member is away", got)
	}
	j2 := join("A2", "t4")
	j2.InstanceID = kmsg.StringPtr("inst")
	got, e := c.ok(j2)
	if e != ea || !maps.EqualFunc(got, keep, slices.Equal) {
		t.Fatalf("the instance's new member id got %v at %d, want %v at %d", got, e, keep, ea)
	}
	c.n.srv.gmu.Lock()
	after := c.n.srv.cg.groups["cg"].epoch
	c.n.srv.gmu.Unlock()
	if after != groupEpoch {
		t.Fatalf("group epoch moved from %d to %d on a static rejoin", groupEpoch, after)
	}
	j3 := join("A3", "t4")
	j3.InstanceID = kmsg.StringPtr("inst")
	if code := c.code(j3); code != errUnreleasedInstanceID {
		t.Fatalf("join with a held instance id: %d, want UNRELEASED_INSTANCE_ID", code)
	}
	leave.MemberID = "A2"
	c.ok(leave)
	c.n.srv.gmu.Lock()
	c.n.srv.expireConsumerGroups(time.Now().Add(cgDefaultSession + time.Second))
	c.n.srv.gmu.Unlock()
	c.checkExclusive()
	// B's session ended too (no heartbeat in the window); it rejoins.
	all, _ := c.ok(join("B", "t4"))
	if count(all) != 4 {
		t.Fatalf("after the static member's session B got %v, want all 4", all)
	}
}

// TestConsumerGroupRebalanceTimeout: a member that does not revoke within
// its rebalance timeout is removed; the other gets every partition.
func TestConsumerGroupRebalanceTimeout(t *testing.T) {
	c := newCGTest(t)
	_, ea := c.ok(join("A", "t4"))
	_, eb := c.ok(join("B", "t4"))
	c.ok(hb("A", ea, nil)) // told to revoke two; never reports it
	c.n.srv.gmu.Lock()
	c.n.srv.expireConsumerGroups(time.Now().Add(time.Second)) // within both timeouts
	c.n.srv.gmu.Unlock()
	if got, _ := c.ok(hb("B", eb, map[string][]int32{})); count(got) != 0 {
		t.Fatalf("B got %v while A is revoking", got)
	}
	c.n.srv.gmu.Lock()
	c.n.srv.expireConsumerGroups(time.Now().Add(31 * time.Second)) // past A's 30 s rebalance timeout
	c.n.srv.gmu.Unlock()
	if code := c.code(hb("A", ea, nil)); code != errUnknownMemberID {
		t.Fatalf("A after its rebalance timeout: %d, want UNKNOWN_MEMBER_ID", code)
	}
	if got, _ := c.ok(hb("B", eb, map[string][]int32{})); count(got) != 4 {
		t.Fatalf("B got %v, want all 4", got)
	}
}

// TestConsumerGroupSubscriptionsAndRegex: members subscribing to different
// topics get only those; a regex matches whole names; a topic created
// later that matches is assigned at the next heartbeat after the refresh.
func TestConsumerGroupSubscriptionsAndRegex(t *testing.T) {
	c := newCGTest(t)
	a, _ := c.ok(join("A", "t2"))
	if count(a) != 2 || len(a["t2"]) != 2 {
		t.Fatalf("A: %v", a)
	}
	jb := join("B")
	jb.SubscribedTopicNames, jb.SubscribedTopicRegex = nil, kmsg.StringPtr("t[4-9]")
	b, eb := c.ok(jb)
	if count(b) != 4 || len(b["t4"]) != 4 {
		t.Fatalf("B (regex t[4-9]): %v, want t4 0-3", b)
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "t5", 1, 1
	req.Topics = append(req.Topics, rt)
	c.n.srv.createTopics(req, "")
	c.n.srv.gmu.Lock()
	c.n.srv.cg.groups["cg"].regexAt = time.Time{} // the refresh is due
	c.n.srv.gmu.Unlock()
	resp := c.send(hb("B", eb, b))
	if resp.ErrorCode != 0 || resp.Assignment == nil || len(resp.Assignment.Topics) != 2 || resp.MemberEpoch <= eb {
		t.Fatalf("after t5 was created: %+v", resp)
	}
}

// TestConsumerGroupClassicMixing: one group id is a classic group or a
// consumer group while it has members, as Kafka refuses mixing; an empty
// group of either kind becomes the other.
func TestConsumerGroupClassicMixing(t *testing.T) {
	c := newCGTest(t)
	c.ok(join("A", "t4"))
	jg := joinReq("cg", "", "")
	jg.SetVersion(3)
	if r := c.n.srv.joinGroup(jg, "client", "host").(*kmsg.JoinGroupResponse); r.ErrorCode != errInconsistentGroupProtocol {
		t.Fatalf("classic join to a consumer group: %d, want INCONSISTENT_GROUP_PROTOCOL", r.ErrorCode)
	}
	c.ok(hb("A", -1, nil))
	r := c.n.srv.joinGroup(jg, "client", "host").(*kmsg.JoinGroupResponse)
	if r.ErrorCode != 0 {
		t.Fatalf("classic join to the emptied group: %d", r.ErrorCode)
	}
	if code := c.code(join("B", "t4")); code != errGroupIDUnknown {
		t.Fatalf("heartbeat to a classic group: %d, want GROUP_ID_NOT_FOUND", code)
	}
	d := kmsg.NewPtrConsumerGroupDescribeRequest()
	d.Groups = []string{"cg"}
	if rg := c.n.srv.consumerGroupDescribe(d).(*kmsg.ConsumerGroupDescribeResponse).Groups[0]; rg.ErrorCode != errGroupIDUnknown {
		t.Fatalf("describing a classic group: %d, want GROUP_ID_NOT_FOUND", rg.ErrorCode)
	}
}

// TestConsumerGroupDescribeAndList: ConsumerGroupDescribe shows epochs,
// members, assignments and targets; ListGroups lists the group as a
// consumer group (ListGroups v5 filters by type), Info (keel kafka, the
// console) and GroupCounts report it; DescribeGroups does not describe it.
func TestConsumerGroupDescribeAndList(t *testing.T) {
	c := newCGTest(t)
	_, ea := c.ok(join("A", "t4"))
	c.ok(join("B", "t4"))
	c.ok(hb("A", ea, nil))
	d := kmsg.NewPtrConsumerGroupDescribeRequest()
	d.Version, d.Groups = 1, []string{"cg", "nope"}
	r := c.n.srv.consumerGroupDescribe(d).(*kmsg.ConsumerGroupDescribeResponse)
	g := r.Groups[0]
	if g.ErrorCode != 0 || g.State != "Reconciling" || g.Epoch != 2 || g.AssignmentEpoch != 2 || g.AssignorName != assignorUniform || len(g.Members) != 2 {
		t.Fatalf("described %+v", g)
	}
	ma := g.Members[0]
	if ma.MemberID != "A" || ma.MemberEpoch != 1 || len(ma.Assignment.TopicPartitions[0].Partitions) != 2 || len(ma.TargetAssignment.TopicPartitions[0].Partitions) != 2 || ma.MemberType != 1 {
		t.Fatalf("member A described %+v", ma)
	}
	if r.Groups[1].ErrorCode != errGroupIDUnknown {
		t.Fatalf("unknown group: %d", r.Groups[1].ErrorCode)
	}
	lg := c.n.srv.listGroups(kmsg.NewPtrListGroupsRequest()).(*kmsg.ListGroupsResponse)
	if len(lg.Groups) != 1 || lg.Groups[0].GroupType != "consumer" || lg.Groups[0].GroupState != "Reconciling" {
		t.Fatalf("listed %+v", lg.Groups)
	}
	info := c.n.srv.Info().Groups
	if len(info) != 1 || info[0].Name != "cg" || info[0].Protocol != assignorUniform || info[0].Generation != 2 || len(info[0].Members) != 2 ||
		len(info[0].Members[0].Assignment) != 1 || len(info[0].Members[0].Assignment[0].Partitions) != 2 {
		t.Fatalf("Info reported %+v", info)
	}
	if groups, members := c.n.srv.GroupCounts(); groups != 1 || members != 2 {
		t.Fatalf("GroupCounts: %d groups, %d members", groups, members)
	}
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{"cg"}
	if rg := c.n.srv.describeGroups(dg).(*kmsg.DescribeGroupsResponse).Groups[0]; rg.ErrorCode != errGroupIDUnknown {
		t.Fatalf("DescribeGroups of a consumer group: %d", rg.ErrorCode)
	}
	// A classic group beside it; ListGroups v5 filters by type.
	jg := joinReq("classic-g", "", "")
	jg.SetVersion(3)
	if r := c.n.srv.joinGroup(jg, "client", "host").(*kmsg.JoinGroupResponse); r.ErrorCode != 0 {
		t.Fatalf("classic join: %d", r.ErrorCode)
	}
	for filter, want := range map[string]string{"consumer": "cg", "Classic": "classic-g"} {
		l := kmsg.NewPtrListGroupsRequest()
		l.Version, l.TypesFilter = 5, []string{filter}
		got := c.n.srv.listGroups(l).(*kmsg.ListGroupsResponse).Groups
		if len(got) != 1 || got[0].Group != want {
			t.Fatalf("ListGroups v5 of type %s: %+v, want %s only", filter, got, want)
		}
	}
}

func commitReq(version int16, member string, epoch int32, parts ...int32) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.MemberID, req.Generation = version, "cg", member, epoch
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "t4"
	for _, p := range parts {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, 0
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

func commitCodes(s *Server, req *kmsg.OffsetCommitRequest) map[int32]int16 {
	out := map[int32]int16{}
	for _, p := range s.offsetCommit(req, "").(*kmsg.OffsetCommitResponse).Topics[0].Partitions {
		out[p.Partition] = p.ErrorCode
	}
	return out
}

// TestConsumerGroupCommitEpochs: OffsetCommit v9 to a consumer group is
// checked against the member's assignment epochs: it commits the
// partitions it owns at its epoch, at an older epoch only those it got at
// or before it, never a partition it does not own nor above its epoch
// (STALE_MEMBER_EPOCH); an unknown member, a commit without a member and
// a member's commit below v9 are refused; the offsets are the broker's, read back by OffsetFetch v8
// naming several groups, and OffsetFetch v9 checks the member.
func TestConsumerGroupCommitEpochs(t *testing.T) {
	c := newCGTest(t)
	s := c.n.srv
	_, ea := c.ok(join("A", "t4")) // epoch 1: t4 0-3
	c.ok(join("B", "t4"))          // epoch 2
	keep, _ := c.ok(hb("A", ea, nil))
	_, ea2 := c.ok(hb("A", ea, keep)) // A at 2 with two partitions got at 1
	c.ok(hb("B", 2, map[string][]int32{}))
	c.ok(hb("B", -1, nil))               // epoch 3: A's target is all four again
	all, ea3 := c.ok(hb("A", ea2, keep)) // the other two come at epoch 3
	if count(all) != 4 || ea3 != 3 {
		t.Fatalf("A: %v at %d", all, ea3)
	}
	fresh := []int32{}
	for _, p := range all["t4"] {
		if !slices.Contains(keep["t4"], p) {
			fresh = append(fresh, p)
		}
	}
	for _, tc := range []struct {
		name string
		req  *kmsg.OffsetCommitRequest
		want map[int32]int16
	}{
		{"its epoch", commitReq(9, "A", ea3, 0, 1, 2, 3), map[int32]int16{0: 0, 1: 0, 2: 0, 3: 0}},
		{"epoch above", commitReq(9, "A", ea3+1, 0), map[int32]int16{0: errStaleMemberEpoch}},
		{"a partition it does not own", func() *kmsg.OffsetCommitRequest {
			r := commitReq(9, "A", ea3, 0)
			r.Topics[0].Topic = "t2"
			return r
		}(), map[int32]int16{0: errStaleMemberEpoch}},
		{"older epoch", commitReq(9, "A", ea, keep["t4"][0], fresh[0]), map[int32]int16{keep["t4"][0]: 0, fresh[0]: errStaleMemberEpoch}},
		{"unknown member", commitReq(9, "nobody", ea3, 0), map[int32]int16{0: errUnknownMemberID}},
		{"no member", commitReq(9, "", -1, 0), map[int32]int16{0: errUnknownMemberID}},
		{"below v9", commitReq(8, "A", ea3, 0), map[int32]int16{0: errUnsupportedVersion}},
	} {
		if got := commitCodes(s, tc.req); !maps.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// A committed offset 0 for every partition above; commit 7 on one and
	// read it back with another group in the same request.
	up := commitReq(9, "A", ea3, 2)
	up.Topics[0].Partitions[0].Offset = 7
	if got := commitCodes(s, up); got[2] != 0 {
		t.Fatalf("commit: %v", got)
	}
	f := kmsg.NewPtrOffsetFetchRequest()
	f.Version = 8
	for _, g := range []string{"cg", "other"} {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = g
		rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t4", Partitions: []int32{2, 3}}}
		f.Groups = append(f.Groups, rg)
	}
	r := s.handle(&request{key: 9, version: 8, body: f}).(*kmsg.OffsetFetchResponse)
	if len(r.Groups) != 2 || r.Groups[0].Group != "cg" || r.Groups[1].Group != "other" {
		t.Fatalf("fetched groups %+v", r.Groups)
	}
	if ps := r.Groups[0].Topics[0].Partitions; ps[0].Offset != 7 || ps[1].Offset != 0 {
		t.Fatalf("cg offsets %+v, want 7 and 0", ps)
	}
	if ps := r.Groups[1].Topics[0].Partitions; ps[0].Offset != -1 || ps[1].Offset != -1 {
		t.Fatalf("other's offsets %+v, want none (-1)", ps)
	}
	f.Version = 9
	f.Groups = f.Groups[:1]
	f.Groups[0].MemberID, f.Groups[0].MemberEpoch = kmsg.StringPtr("nobody"), 1
	if code := s.handle(&request{key: 9, version: 9, body: f}).(*kmsg.OffsetFetchResponse).Groups[0].ErrorCode; code != errUnknownMemberID {
		t.Fatalf("fetch by an unknown member: %d", code)
	}
	f.Groups[0].MemberID, f.Groups[0].MemberEpoch = kmsg.StringPtr("A"), ea3+1
	if code := s.handle(&request{key: 9, version: 9, body: f}).(*kmsg.OffsetFetchResponse).Groups[0].ErrorCode; code != errStaleMemberEpoch {
		t.Fatalf("fetch above the member's epoch: %d", code)
	}
	f.Groups[0].MemberEpoch = ea3
	if rg := s.handle(&request{key: 9, version: 9, body: f}).(*kmsg.OffsetFetchResponse).Groups[0]; rg.ErrorCode != 0 || rg.Topics[0].Partitions[0].Offset != 7 {
		t.Fatalf("fetch by the member: %+v", rg)
	}
}

// TestConsumerGroupAuthorization: with access control, a heartbeat needs
// SUB on the group, ConsumerGroupDescribe PUB or SUB, and each group of an
// OffsetFetch v8 is checked as an OffsetFetch of it alone (the group, then
// its topics).
func TestConsumerGroupAuthorization(t *testing.T) {
	n := startACLNode(t)
	ct := kmsg.NewPtrCreateTopicsRequest()
	for _, name := range []string{"orders", "audit"} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 2, 1
		ct.Topics = append(ct.Topics, rt)
	}
	n.srv.createTopics(ct, "")
	as := func(body kmsg.Request) kmsg.Response {
		return n.srv.authorized(principal{n.srv.cfg.ACL, "consumer1"}, &request{key: body.Key(), version: body.GetVersion(), body: body})
	}
	j := join("m1", "orders")
	j.Group = "other"
	if code := as(j).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode; code != errGroupAuthorization {
		t.Fatalf("heartbeat to a group without SUB: %d", code)
	}
	j.Group = "billing"
	if r := as(j).(*kmsg.ConsumerGroupHeartbeatResponse); r.ErrorCode != 0 || r.Assignment == nil || len(r.Assignment.Topics) != 1 {
		t.Fatalf("heartbeat to billing: %+v", r)
	}
	d := kmsg.NewPtrConsumerGroupDescribeRequest()
	d.Groups = []string{"billing", "other"}
	dr := as(d).(*kmsg.ConsumerGroupDescribeResponse)
	codes := map[string]int16{}
	for _, g := range dr.Groups {
		codes[g.Group] = g.ErrorCode
	}
	if codes["billing"] != 0 || codes["other"] != errGroupAuthorization {
		t.Fatalf("describe: %v", codes)
	}
	f := kmsg.NewPtrOffsetFetchRequest()
	f.Version = 8
	for _, g := range []string{"billing", "other"} {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = g
		rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: "orders", Partitions: []int32{0}}, {Topic: "audit", Partitions: []int32{0}}}
		f.Groups = append(f.Groups, rg)
	}
	fr := as(f).(*kmsg.OffsetFetchResponse)
	if len(fr.Groups) != 2 || fr.Groups[0].ErrorCode != 0 || fr.Groups[1].ErrorCode != errGroupAuthorization {
		t.Fatalf("offset fetch groups: %+v", fr.Groups)
	}
	topics := map[string]int16{}
	for _, tp := range fr.Groups[0].Topics {
		topics[tp.Topic] = tp.Partitions[0].ErrorCode
	}
	if topics["orders"] != 0 || topics["audit"] != errTopicAuthorization {
		t.Fatalf("billing's topics: %v", topics)
	}
}

// TestConsumerGroupWire: ConsumerGroupHeartbeat v0 (the coordinator makes
// the member id) and ConsumerGroupDescribe over a connection; OffsetDelete
// refuses a topic a member subscribes to.
func TestConsumerGroupWire(t *testing.T) {
	c := newCGTest(t)
	rc := dialRaw(t, c.n.addr)
	j := join("", "t2")
	j.Version = 0
	r := rc.do(j, 0).(*kmsg.ConsumerGroupHeartbeatResponse)
	if r.ErrorCode != 0 || r.MemberID == nil || len(*r.MemberID) < 16 || r.MemberEpoch != 1 || r.HeartbeatIntervalMillis != 5000 || r.Assignment == nil {
		t.Fatalf("v0 join: %+v", r)
	}
	d := kmsg.NewPtrConsumerGroupDescribeRequest()
	d.Groups = []string{"cg"}
	dr := rc.do(d, 1).(*kmsg.ConsumerGroupDescribeResponse)
	if len(dr.Groups) != 1 || dr.Groups[0].State != "Stable" || len(dr.Groups[0].Members) != 1 || dr.Groups[0].Members[0].MemberID != *r.MemberID {
		t.Fatalf("describe: %+v", dr.Groups)
	}
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "cg"
	for _, topic := range []string{"t2", "t4"} {
		rt := kmsg.NewOffsetDeleteRequestTopic()
		rt.Topic = topic
		rt.Partitions = []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}
		od.Topics = append(od.Topics, rt)
	}
	codes := map[string]int16{}
	odr := c.n.srv.offsetDelete(od, "").(*kmsg.OffsetDeleteResponse)
	if odr.ErrorCode != 0 {
		t.Fatalf("offset delete: %d", odr.ErrorCode)
	}
	for _, rt := range odr.Topics {
		codes[rt.Topic] = rt.Partitions[0].ErrorCode
	}
	if codes["t2"] != errGroupSubscribedToTopic || codes["t4"] != 0 {
		t.Fatalf("offset delete codes %v, want t2 refused as subscribed", codes)
	}
}

// TestConsumerGroupConfiguredTimings: the heartbeat interval members are
// told and the session timeout are Config's when set.
func TestConsumerGroupConfiguredTimings(t *testing.T) {
	n := startNodeWith(t, nil, Config{ConsumerGroupSessionTimeout: 2 * time.Second, ConsumerGroupHeartbeatInterval: 250 * time.Millisecond})
	r := n.srv.consumerGroupHeartbeat(join("A", "x"), "client", "host").(*kmsg.ConsumerGroupHeartbeatResponse)
	if r.ErrorCode != 0 || r.HeartbeatIntervalMillis != 250 {
		t.Fatalf("join: %d, interval %d ms", r.ErrorCode, r.HeartbeatIntervalMillis)
	}
	n.srv.gmu.Lock()
	n.srv.expireConsumerGroups(time.Now().Add(time.Second))
	within := len(n.srv.cg.groups["cg"].members)
	n.srv.expireConsumerGroups(time.Now().Add(3 * time.Second))
	after := len(n.srv.cg.groups["cg"].members)
	n.srv.gmu.Unlock()
	if within != 1 || after != 0 {
		t.Fatalf("members within the 2 s session: %d, after it: %d", within, after)
	}
}

// TestOffsetsByTopicID: OffsetCommit and OffsetFetch v10 name topics by
// id: known ids are committed and read back under their ids, an unknown id
// is UNKNOWN_TOPIC_ID; with access control the topic behind the id is
// checked.
func TestOffsetsByTopicID(t *testing.T) {
	c := newCGTest(t)
	s := c.n.srv
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group = 10, "plain"
	bogus := [16]byte{1, 2, 3}
	for _, id := range [][16]byte{topicID("t4"), bogus} {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.TopicID = id
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 1, 5
		rt.Partitions = append(rt.Partitions, rp)
		commit.Topics = append(commit.Topics, rt)
	}
	r := s.handle(&request{key: 8, version: 10, body: commit}).(*kmsg.OffsetCommitResponse)
	codes := map[[16]byte]int16{}
	for _, rt := range r.Topics {
		codes[rt.TopicID] = rt.Partitions[0].ErrorCode
	}
	if r.GetVersion() != 10 || len(codes) != 2 || codes[topicID("t4")] != 0 || codes[bogus] != errUnknownTopicID {
		t.Fatalf("commit v10: version %d, codes %v", r.GetVersion(), codes)
	}
	if off, ok := c.n.core.ConsumerOffset("plain", "t4", 1, false); !ok || off != 5 {
		t.Fatalf("committed %d %v, want 5", off, ok)
	}
	f := kmsg.NewPtrOffsetFetchRequest()
	f.Version = 10
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = "plain"
	rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{{TopicID: topicID("t4"), Partitions: []int32{1}}, {TopicID: bogus, Partitions: []int32{1}}}
	f.Groups = append(f.Groups, rg)
	fr := s.handle(&request{key: 9, version: 10, body: f}).(*kmsg.OffsetFetchResponse)
	got := map[[16]byte]kmsg.OffsetFetchResponseGroupTopicPartition{}
	for _, tp := range fr.Groups[0].Topics {
		got[tp.TopicID] = tp.Partitions[0]
	}
	if got[topicID("t4")].Offset != 5 || got[topicID("t4")].ErrorCode != 0 || got[bogus].ErrorCode != errUnknownTopicID {
		t.Fatalf("fetch v10: %+v", got)
	}
	// On the wire at v10 the answer carries the ids.
	back := kmsg.NewPtrOffsetCommitResponse()
	back.SetVersion(10)
	if err := back.ReadFrom(r.AppendTo(nil)); err != nil || len(back.Topics) != 2 || back.Topics[0].TopicID != r.Topics[0].TopicID || back.Topics[0].TopicID == ([16]byte{}) {
		t.Fatalf("commit answer read back at v10: %v %+v", err, back.Topics)
	}

	a := startACLNode(t)
	ct := kmsg.NewPtrCreateTopicsRequest()
	for _, name := range []string{"orders", "audit"} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
		ct.Topics = append(ct.Topics, rt)
	}
	a.srv.createTopics(ct, "")
	commit.Group = "billing"
	commit.Topics[0].TopicID, commit.Topics[1].TopicID = topicID("orders"), topicID("audit")
	commit.Topics[0].Partitions[0].Partition, commit.Topics[1].Partitions[0].Partition = 0, 0
	ar := a.srv.authorized(principal{a.srv.cfg.ACL, "consumer1"}, &request{key: 8, version: 10, body: commit}).(*kmsg.OffsetCommitResponse)
	codes = map[[16]byte]int16{}
	for _, rt := range ar.Topics {
		codes[rt.TopicID] = rt.Partitions[0].ErrorCode
	}
	if codes[topicID("orders")] != 0 || codes[topicID("audit")] != errTopicAuthorization {
		t.Fatalf("commit v10 under access control: %v", codes)
	}
}
