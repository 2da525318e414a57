package kafka

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// modelClient is an honest member as a client sees itself: the partitions
// it owns are the last assignment it was told, and it reports them.
type modelClient struct {
	id    string
	epoch int32
	owned map[string][]int32
}

// TestConsumerGroupModel drives the coordinator with random steps of
// honest clients — joins, heartbeats full or keepalive, answers lost on
// the way, leaves, members dying (their session expires) — and checks
// after every step that no partition is owned by two members (in the
// coordinator's books) and that what every live client owns is a subset
// of what the coordinator gives it; at the end every partition is
// assigned and the loads differ by at most one. The seed is printed on
// failure.
func TestConsumerGroupModel(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed) })
	}
}

func runModel(t *testing.T, seed int64) {
	c := newCGTest(t)
	s := c.n.srv
	rng := rand.New(rand.NewSource(seed))
	clients := map[string]*modelClient{}
	next := 0
	names := map[[16]byte]string{topicID("t4"): "t4", topicID("t2"): "t2"}
	apply := func(cl *modelClient, r *kmsg.ConsumerGroupHeartbeatResponse) {
		switch r.ErrorCode {
		case 0:
			cl.epoch = r.MemberEpoch
			if r.Assignment != nil {
				cl.owned = map[string][]int32{}
				for _, tp := range r.Assignment.Topics {
					cl.owned[names[tp.TopicID]] = tp.Partitions
				}
			}
		case errFencedMemberEpoch:
			cl.epoch, cl.owned = 0, map[string][]int32{} // rejoin with the same id
		case errUnknownMemberID:
			delete(clients, cl.id)
		default:
			t.Fatalf("seed %d: member %s: error %d %s", seed, cl.id, r.ErrorCode, deref(r.ErrorMessage))
		}
	}
	beat := func(cl *modelClient, full, lose bool) {
		var req *kmsg.ConsumerGroupHeartbeatRequest
		if cl.epoch == 0 {
			req = join(cl.id, "t4", "t2")
		} else {
			var owned map[string][]int32
			if full {
				owned = cl.owned
			}
			req = hb(cl.id, cl.epoch, owned)
		}
		r := c.send(req)
		if !lose {
			apply(cl, r)
		}
	}
	check := func(step int) {
		s.gmu.Lock()
		defer s.gmu.Unlock()
		g := s.cg.groups["cg"]
		for _, cl := range clients {
			m := g.members[cl.id]
			if m == nil {
				continue // removed: its next heartbeat is UNKNOWN_MEMBER_ID
			}
			for topic, ps := range cl.owned {
				for _, p := range ps {
					k := tpKey{topic, p}
					_, a := m.assigned[k]
					_, r := m.revoking[k]
					if !a && !r {
						t.Fatalf("seed %d step %d: client %s owns %v, which the coordinator does not give it", seed, step, cl.id, k)
					}
				}
			}
		}
	}
	for step := 0; step < 300; step++ {
		ids := slices.Sorted(maps.Keys(clients))
		switch x := rng.Intn(100); {
		case x < 10 || len(ids) == 0:
			cl := &modelClient{id: fmt.Sprintf("m%d", next), owned: map[string][]int32{}}
			next++
			clients[cl.id] = cl
			beat(cl, true, false)
		case x < 80:
			beat(clients[ids[rng.Intn(len(ids))]], rng.Intn(2) == 0, rng.Intn(10) == 0)
		case x < 88:
			cl := clients[ids[rng.Intn(len(ids))]]
			c.send(hb(cl.id, -1, nil))
			delete(clients, cl.id)
		default: // a member dies: its session expires
			cl := clients[ids[rng.Intn(len(ids))]]
			s.gmu.Lock()
			if m := s.cg.groups["cg"].members[cl.id]; m != nil {
				m.deadline = time.Now().Add(-time.Second)
			}
			s.expireConsumerGroups(time.Now())
			s.gmu.Unlock()
			delete(clients, cl.id)
		}
		c.checkExclusive()
		check(step)
	}
	if len(clients) == 0 {
		clients["last"] = &modelClient{id: "last", owned: map[string][]int32{}}
	}
	for round := 0; round < 6; round++ {
		for _, id := range slices.Sorted(maps.Keys(clients)) {
			beat(clients[id], true, false)
		}
	}
	check(-1)
	loads := map[string]int{}
	total := 0
	for id, cl := range clients {
		loads[id] = count(cl.owned)
		total += loads[id]
	}
	if total != 6 {
		t.Fatalf("seed %d: after settling %d of 6 partitions are owned: %v", seed, total, loads)
	}
	lo, hi := 6, 0
	for _, l := range loads {
		lo, hi = min(lo, l), max(hi, l)
	}
	if hi-lo > 1 {
		t.Fatalf("seed %d: loads %v differ by more than one", seed, loads)
	}
}
