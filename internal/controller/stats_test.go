package controller

import (
	"testing"
	"time"
)

// Stats counts the elections the leader committed by kind and the fences
// answered to it, and shows a group without a live master from the
// master's last heartbeat until a new master is elected.
func TestStatsElectionsFencesAndTimeWithoutMaster(t *testing.T) {
	h := newHarness(t)
	b1, b2, b3 := h.groupOfThree()
	l := h.nodes[h.leader()]
	s := l.Stats()
	if !s.Acting || s.State != "Leader" || !s.Voter || !s.LeaderKnown {
		t.Fatalf("leader's stats %+v", s)
	}
	if s.Elections[EventInitial] != 1 || s.Elections[EventElect] != 0 || s.FencedReplicas != 3 {
		t.Fatalf("after the first election: elections %v, fenced %d; want initial 1, fenced 3", s.Elections, s.FencedReplicas)
	}
	if len(s.Groups) != 1 || s.Groups[0].Name != "broker-a" || s.Groups[0].MasterEpoch != 1 || !s.Groups[0].WithoutMasterSince.IsZero() {
		t.Fatalf("groups %+v", s.Groups)
	}

	// Every replica down: the master's silence is seen, nothing can be
	// elected, and the group stays without a master from the master's
	// last heartbeat.
	lastBeat := h.clock.Now()
	for _, b := range []*fakeBroker{b1, b2, b3} {
		b.mu.Lock()
		b.down = true
		b.mu.Unlock()
	}
	h.run(testD + 2*time.Second)
	s = l.Stats()
	since := s.Groups[0].WithoutMasterSince
	if since.IsZero() || since.After(lastBeat) || lastBeat.Sub(since) > time.Second {
		t.Fatalf("without a master since %v, want the master's last heartbeat (about %v)", since, lastBeat)
	}
	if s.Elections[EventElect] != 0 {
		t.Fatalf("elections %v with no replica up", s.Elections)
	}
	// On a follower: the same groups and epochs, no time without a master
	// (only the acting leader knows), no elections counted.
	for _, n := range h.nodes {
		if n != l {
			fs := n.Stats()
			if fs.Acting || fs.State != "Follower" || !fs.Voter || len(fs.Groups) != 1 || !fs.Groups[0].WithoutMasterSince.IsZero() ||
				len(fs.Elections) != 0 || fs.FencedReplicas != 0 {
				t.Fatalf("follower's stats %+v", fs)
			}
		}
	}

	// Two replicas return: one is elected; the group has a master again.
	for _, b := range []*fakeBroker{b2, b3} {
		b.mu.Lock()
		b.down = false
		b.mu.Unlock()
	}
	g := h.waitEpoch(2)
	h.run(time.Second)
	s = l.Stats()
	// The election fences the in-sync replicas alive when it starts: both,
	// or only the first whose heartbeat arrived when the leader's scan ran
	// between the two. The count is the answers the replicas gave.
	answered := 0
	for _, b := range []*fakeBroker{b2, b3} {
		b.mu.Lock()
		fences, id := b.fences, b.id
		b.mu.Unlock()
		if len(fences) > 1 || len(fences) == 1 && fences[0] != 2 || id == g.MasterID && len(fences) != 1 {
			t.Fatalf("replica %d (master %d) fenced %v, want at most [2], and [2] for the master", id, g.MasterID, fences)
		}
		answered += len(fences)
	}
	if s.Elections[EventElect] != 1 || s.Elections[EventInitial] != 1 || s.FencedReplicas != uint64(3+answered) {
		t.Fatalf("after the election: elections %v, fenced %d; want elect 1, initial 1, fenced %d", s.Elections, s.FencedReplicas, 3+answered)
	}
	if s.Groups[0].MasterEpoch != g.MasterEpoch || !s.Groups[0].WithoutMasterSince.IsZero() {
		t.Fatalf("after the election: %+v", s.Groups)
	}
}
