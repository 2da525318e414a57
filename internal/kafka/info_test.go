package kafka

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestInfo: a group member that consumes shows in Info with its client
// id, host and the partitions the group assigned it, and its connection
// with its client id; GroupMembers answers for the group.
func TestInfo(t *testing.T) {
	n := startNode(t, nil)
	p, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produceAll(t, p, "info", 0, 2, "a")
	produceAll(t, p, "info", 1, 2, "b")
	c := groupClient(t, n.addr, "billing", "info", kgo.ClientID("billing-1"))
	defer c.Close()
	pollValues(t, c, 4)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info := n.srv.Info()
		if len(info.Groups) == 1 && info.Groups[0].State == "Stable" && len(info.Groups[0].Members) == 1 &&
			len(info.Groups[0].Members[0].Assignment) == 1 {
			g := info.Groups[0]
			m := g.Members[0]
			if g.Name != "billing" || g.ProtocolType != "consumer" || m.ClientID != "billing-1" || m.Host != "127.0.0.1" ||
				!strings.HasPrefix(m.MemberID, "billing-1-") || m.Assignment[0].Topic != "info" || len(m.Assignment[0].Partitions) != 2 ||
				m.Assignment[0].Partitions[0] != 0 || m.Assignment[0].Partitions[1] != 1 {
				t.Fatalf("group %+v", g)
			}
			found := false
			for _, ci := range info.Connections {
				found = found || ci.ClientID == "billing-1" && ci.Requests > 0 && ci.SinceMs > 0
			}
			if !found {
				t.Fatalf("no connection of billing-1: %+v", info.Connections)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("info %+v", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if g, m := n.srv.GroupCounts(); g != 1 || m != 1 {
		t.Fatalf("GroupCounts: %d groups, %d members", g, m)
	}
	if ms := n.srv.GroupMembers("billing"); len(ms) != 1 || ms[0].ClientID != "billing-1" {
		t.Fatalf("GroupMembers: %+v", ms)
	}
	if ms := n.srv.GroupMembers("nobody"); ms != nil {
		t.Fatalf("GroupMembers of an unknown group: %+v", ms)
	}
}
