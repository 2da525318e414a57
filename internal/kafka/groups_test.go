package kafka

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func groupClient(t *testing.T, addr, group, topic string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.FetchMaxWait(200 * time.Millisecond), kgo.DisableAutoCommit()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func pollValues(t *testing.T, cl *kgo.Client, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("polled %d of %d", len(got), n)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		for _, r := range fs.Records() {
			got = append(got, string(r.Value))
		}
	}
	return got
}

// TestKgoGroupCommitAndResume: a group member consumes both partitions,
// commits and leaves; the next member of the group resumes at the
// committed offsets, also after a broker restart.
func TestKgoGroupCommitAndResume(t *testing.T) {
	n := startNode(t, nil)
	p, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produceAll(t, p, "grp", 0, 10, "p0")
	produceAll(t, p, "grp", 1, 10, "p1")
	c1 := groupClient(t, n.addr, "g1", "grp")
	if got := pollValues(t, c1, 20); len(got) != 20 {
		t.Fatalf("first member got %d", len(got))
	}
	if err := c1.CommitUncommittedOffsets(context.Background()); err != nil {
		t.Fatalf("commit: %v", err)
	}
	c1.Close() // leaves the group
	produceAll(t, p, "grp", 0, 3, "new0")
	p.Close()
	n.stop()
	n2 := startNode(t, n.fs)
	c2 := groupClient(t, n2.addr, "g1", "grp")
	defer c2.Close()
	got := pollValues(t, c2, 3)
	sort.Strings(got)
	if len(got) != 3 || got[0] != "new0-0" || got[2] != "new0-2" {
		t.Fatalf("after commit and restart the group resumed with %q, want only new0-0..2", got)
	}
}

// TestKgoGroupRebalance: two members share the two partitions; when one
// leaves, the other gets both.
func TestKgoGroupRebalance(t *testing.T) {
	n := startNode(t, nil)
	p, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	produceAll(t, p, "reb", -1, 1, "x") // creates the topic
	p.Close()
	var mu sync.Mutex
	owned := map[string]map[int32]bool{}
	track := func(name string) kgo.Opt {
		return kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			if owned[name] == nil {
				owned[name] = map[int32]bool{}
			}
			for _, p := range m["reb"] {
				owned[name][p] = true
			}
		})
	}
	revoke := func(name string) kgo.Opt {
		return kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range m["reb"] {
				delete(owned[name], p)
			}
		})
	}
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(owned[name])
	}
	waitUntil := func(what string, cond func() bool, polls ...*kgo.Client) {
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (a %d, b %d)", what, count("a"), count("b"))
			}
			for _, c := range polls {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				c.PollFetches(ctx)
				cancel()
			}
		}
	}
	a := groupClient(t, n.addr, "g2", "reb", track("a"), revoke("a"))
	defer a.Close()
	waitUntil("a to own both partitions", func() bool { return count("a") == 2 }, a)
	b := groupClient(t, n.addr, "g2", "reb", track("b"), revoke("b"))
	waitUntil("the partitions to be shared", func() bool { return count("a") == 1 && count("b") == 1 }, a, b)
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{"g2", "nobody"}
	dr, err := dg.RequestWith(context.Background(), a)
	if err != nil || len(dr.Groups) != 2 || dr.Groups[0].State != "Stable" || len(dr.Groups[0].Members) != 2 ||
		dr.Groups[0].ProtocolType != "consumer" || dr.Groups[1].State != "Dead" {
		t.Fatalf("DescribeGroups: %v %+v", err, dr)
	}
	lr, err := kmsg.NewPtrListGroupsRequest().RequestWith(context.Background(), a)
	if err != nil || len(lr.Groups) != 1 || lr.Groups[0].Group != "g2" || lr.Groups[0].GroupState != "Stable" {
		t.Fatalf("ListGroups: %v %+v", err, lr)
	}
	b.Close()
	waitUntil("a to own both again", func() bool { return count("a") == 2 }, a)
}

// TestCommitWhileRebalancing: a member of the current generation may
// commit while the next rebalance is being prepared (franz-go's
// cooperative members do; Kafka allows it), not while it completes.
func TestCommitWhileRebalancing(t *testing.T) {
	n := startNode(t, nil)
	if _, err := n.core.EnsureTopic("cwr", 1, 6); err != nil {
		t.Fatal(err)
	}
	a := dialRaw(t, n.addr)
	join := func(rc *rawConn, member string) *kmsg.JoinGroupResponse {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = "cwr-g", member, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30000, 30000
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0}}}
		return rc.do(req, 3).(*kmsg.JoinGroupResponse)
	}
	ja := join(a, "")
	if ja.ErrorCode != 0 || ja.LeaderID != ja.MemberID {
		t.Fatalf("join: %+v", ja)
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.Generation, sync.MemberID = "cwr-g", ja.Generation, ja.MemberID
	if sr := a.do(sync, 3).(*kmsg.SyncGroupResponse); sr.ErrorCode != 0 {
		t.Fatalf("sync: %+v", sr)
	}
	b := dialRaw(t, n.addr)
	joined := make(chan *kmsg.JoinGroupResponse, 1)
	go func() { joined <- join(b, "") }() // waits: a must rejoin
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.srv.gmu.Lock()
		st := n.srv.groups["cwr-g"].state
		n.srv.gmu.Unlock()
		if st == groupPreparing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no rebalance started")
		}
		time.Sleep(time.Millisecond)
	}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation, commit.MemberID = "cwr-g", ja.Generation, ja.MemberID
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "cwr", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 0}}}}
	if cr := a.do(commit, 3).(*kmsg.OffsetCommitResponse); cr.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("commit while preparing a rebalance: %+v", cr.Topics[0].Partitions[0])
	}
	if jb := join(a, ja.MemberID); jb.ErrorCode != 0 {
		t.Fatalf("rejoin: %+v", jb)
	}
	if jb := <-joined; jb.ErrorCode != 0 || jb.Generation != ja.Generation+1 {
		t.Fatalf("second member's join: %+v", jb)
	}
}

// TestCommitInsideBatch: an offset committed inside a batch is fetched
// back exactly, also after a restart (a Kafka offset is a queue offset:
// the core stores it as it is).
func TestCommitInsideBatch(t *testing.T) {
	n := startNode(t, nil)
	rc := dialRaw(t, n.addr)
	if got := rc.produce(testBatch(10, 0)); got.ErrorCode != 0 {
		t.Fatalf("produce: %+v", got)
	}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = "inside", -1
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "idem", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 4}}}}
	if cr := rc.do(commit, 3).(*kmsg.OffsetCommitResponse); cr.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("commit: %+v", cr)
	}
	fetch := func(rc *rawConn) int64 {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = "inside"
		req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "idem", Partitions: []int32{0}}}
		return rc.do(req, 3).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset
	}
	if off := fetch(rc); off != 4 {
		t.Fatalf("fetched %d, want the committed 4", off)
	}
	// What lag (the console, keel group, /metrics) reads: the group's
	// queue offset against the entry count, in records.
	if c, ok := n.core.ConsumerOffset("inside", "idem", 0, false); !ok || c != 4 || n.st.MaxOffset("idem", 0)-c != 6 {
		t.Fatalf("core offset %d (%v) of %d entries: lag %d, want 6 records", c, ok, n.st.MaxOffset("idem", 0), n.st.MaxOffset("idem", 0)-c)
	}
	n.stop()
	n2 := startNode(t, n.fs)
	if off := fetch(dialRaw(t, n2.addr)); off != 4 {
		t.Fatalf("after a restart fetched %d, want the committed 4", off)
	}
}
