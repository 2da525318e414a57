package controller

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The leader's duties. Liveness (heartbeats, reported log ends) is soft
// state held by the raft leader only, never logged; a new leader starts
// with none and, after a Barrier (its FSM is then current), waits a full
// detection period before any election, so every live broker has had the
// time to find it and heartbeat.

// leaderState is the leader's soft state; everything is under mu.
type leaderState struct {
	mu       sync.Mutex
	leading  bool      // leader, Barrier done, cluster id checked
	term     uint64    // raft term leading began in
	since    time.Time // Clock time leading began
	live     map[ReplicaID]liveness
	seen     map[string]time.Time // Clock time a group was first seen by this leader
	electing map[string]bool      // elections running, by group
	// noMaster is when a group was last found without a live master and
	// no election succeeded (for status), by group.
	noMaster map[string]time.Time
	// retryAt: after a failed election, the Clock time before which the
	// group's next attempt does not start (one FenceTimeout), by group.
	retryAt map[string]time.Time
	// down is, by group, when this leader found it without a live master
	// (the master's last heartbeat if it had one): for Stats.
	down map[string]time.Time
	// leases are the leases this leader granted to ASYNC_MASTERs
	// (lease.go).
	leases leaseState
	// counts are this process's counters for Stats; they survive
	// stepping down and taking over.
	counts statsCounters
	// scans counts checkGroups passes (tests wait for a pass to have seen
	// a clock time before asserting that nothing happened).
	scans atomic.Uint64
}

// liveness is a replica's latest heartbeat.
type liveness struct {
	incarnation uint64
	lastEpoch   uint32
	logEnd      int64
	fencedEpoch uint32
	at          time.Time
}

// Run runs the leader's duties until ctx ends or the node closes. Every
// node runs it; only the raft leader acts.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.stepDown()
			return nil
		case <-c.closed:
			c.stepDown()
			return nil
		case <-c.wake:
		case <-t.C:
		}
		c.step(ctx)
	}
}

func (c *Controller) step(ctx context.Context) {
	if c.raft.State() != raft.Leader {
		c.stepDown()
		return
	}
	term := c.raft.CurrentTerm()
	c.lead.mu.Lock()
	current := c.lead.leading && c.lead.term == term
	c.lead.mu.Unlock()
	if !current && !c.takeOver(term) {
		return
	}
	c.checkGroups(ctx)
}

// takeOver makes this node the acting leader: Barrier (every entry of
// earlier terms applied), the cluster id written or checked, fresh soft
// state. It reports whether the node now acts.
func (c *Controller) takeOver(term uint64) bool {
	if err := c.raft.Barrier(DefaultApplyTimeout).Error(); err != nil {
		c.log.Warn("controller leader: barrier failed; will retry", "err", err)
		return false
	}
	local := c.ClusterID()
	switch fsmID := c.fsm.ClusterID(); {
	case fsmID == "":
		r, err := c.apply(&Command{TimeMillis: c.cfg.Clock.Now().UnixMilli(), Init: &InitCluster{ClusterID: local}})
		if err == nil {
			err = r.Err
		}
		if err != nil {
			c.log.Warn("controller leader: cannot write the cluster id; will retry", "err", err)
			return false
		}
	case fsmID != local:
		c.log.Error("controller leader: the raft log belongs to another cluster; refusing to act",
			"log_cluster_id", fsmID, "cluster_id", local)
		return false
	}
	now := c.cfg.Clock.Now()
	c.lead.mu.Lock()
	c.lead.leading, c.lead.term, c.lead.since = true, term, now
	c.lead.live = map[ReplicaID]liveness{}
	c.lead.seen = map[string]time.Time{}
	c.lead.electing = map[string]bool{}
	c.lead.noMaster = map[string]time.Time{}
	c.lead.retryAt = map[string]time.Time{}
	c.lead.down = map[string]time.Time{}
	// A lease an earlier leader granted ends before this one's first
	// election: it waits a detection period, longer than a lease and its
	// margin (lease.go).
	c.lead.leases = leaseState{grants: map[string]leaseGrant{}, margin: LeaseMargin(c.cfg.LeaseDuration), waiting: map[string]bool{}}
	c.lead.mu.Unlock()
	c.log.Info("controller leader: acting; no election before a full detection period",
		"node_id", c.cfg.NodeID, "term", term, "detection_period", c.cfg.DetectionPeriod)
	return true
}

func (c *Controller) stepDown() {
	c.lead.mu.Lock()
	was := c.lead.leading
	c.lead.leading = false
	c.lead.live = nil
	c.lead.mu.Unlock()
	if was {
		c.log.Info("controller leader: stepped down", "node_id", c.cfg.NodeID)
	}
}

// acting reports whether this node acts as leader now.
func (c *Controller) acting() bool {
	c.lead.mu.Lock()
	defer c.lead.mu.Unlock()
	return c.lead.leading
}

// checkGroups starts an election for every group whose master is silent.
func (c *Controller) checkGroups(ctx context.Context) {
	now := c.cfg.Clock.Now()
	d := c.cfg.DetectionPeriod
	st := c.fsm.State()
	names := make([]string, 0, len(st.Groups))
	for n := range st.Groups {
		names = append(names, n)
	}
	slices.Sort(names)
	l := &c.lead
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.scans.Add(1)
	if !l.leading {
		return
	}
	for _, n := range names {
		if _, ok := l.seen[n]; !ok {
			l.seen[n] = now
		}
	}
	if now.Sub(l.since) < d {
		return
	}
	for _, n := range names {
		g := st.Groups[n]
		if g.MasterID != 0 && l.masterAlive(g, now, d) {
			delete(l.down, n)
		} else if _, ok := l.down[n]; !ok {
			since := now
			if h, ok := l.live[g.MasterID]; ok && g.MasterID != 0 {
				since = h.at
			}
			l.down[n] = since
		}
		if l.electing[n] || now.Sub(l.seen[n]) < d || now.Before(l.retryAt[n]) {
			continue
		}
		if g.MasterID != 0 && l.masterAlive(g, now, d) && !l.fencedAbove(g, now, d) {
			delete(l.noMaster, n)
			continue
		}
		if held, end := l.leases.leaseHeldLocked(n, now); held {
			// The old master may still acknowledge until its lease ends.
			if !l.leases.waiting[n] {
				l.leases.waiting[n] = true
				c.log.Warn("controller: the group's master is gone; waiting for its lease to end before electing", "group", n,
					"master", g.MasterID, "epoch", g.MasterEpoch, "lease_end", end)
			}
			continue
		}
		delete(l.leases.waiting, n)
		cands := l.candidates(g, now, d, false)
		if len(cands) == 0 && !(g.MasterID != 0 && (g.AllowUnclean || c.cfg.AllowUnclean)) {
			if _, ok := l.noMaster[n]; !ok {
				l.noMaster[n] = now
				c.log.Warn("controller: group has no live master and no live in-sync replica to elect", "group", n,
					"master", g.MasterID, "epoch", g.MasterEpoch)
			}
			continue
		}
		l.electing[n] = true
		c.spawn(func() {
			ok := c.elect(ctx, g, now)
			l.mu.Lock()
			delete(l.electing, n)
			if !ok && l.retryAt != nil {
				l.retryAt[n] = c.cfg.Clock.Now().Add(c.cfg.FenceTimeout)
			}
			l.mu.Unlock()
		})
	}
}

// fencedAbove reports whether a live replica of g promised an epoch above
// g's (an election that fenced it and was never committed: its leader
// lost leadership in between). Such a replica refuses the master for
// good; the group elects again, at an epoch it accepts.
func (l *leaderState) fencedAbove(g *Group, now time.Time, d time.Duration) bool {
	for _, r := range g.Replicas {
		if h, ok := l.live[r.ID]; ok && now.Sub(h.at) < d && h.incarnation == r.Incarnation && h.fencedEpoch > g.MasterEpoch {
			return true
		}
	}
	return false
}

// masterAlive: the master heartbeated within d, at the incarnation it was
// elected at (a restarted master is replaced: it never keeps its role by
// itself), and is not fenced above its epoch (then it takes no writes).
func (l *leaderState) masterAlive(g *Group, now time.Time, d time.Duration) bool {
	h, ok := l.live[g.MasterID]
	if !ok || now.Sub(h.at) >= d || h.fencedEpoch > g.MasterEpoch {
		return false
	}
	for _, m := range g.InSync {
		if m.ID == g.MasterID {
			return m.Incarnation == h.incarnation
		}
	}
	return false
}

// candidates are the live replicas (heartbeat within d, at their
// registered incarnation) that may be elected: before a group's first
// election all of them; after, the in-sync members, or with unclean the
// others. A restarted master is a candidate like any member.
func (l *leaderState) candidates(g *Group, now time.Time, d time.Duration, unclean bool) []Replica {
	var out []Replica
	for _, r := range g.Replicas {
		h, ok := l.live[r.ID]
		if !ok || now.Sub(h.at) >= d || h.incarnation != r.Incarnation {
			continue
		}
		if g.MasterEpoch == 0 || g.inSync(r.ID) != unclean {
			if r.ID == g.MasterID && l.masterAlive(g, now, d) {
				continue
			}
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(a, b Replica) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// elect fences the candidates at the next epoch, picks the one with the
// longest log of the newest epoch, and commits ElectMaster. It reports
// whether a master was elected.
func (c *Controller) elect(ctx context.Context, g *Group, now time.Time) bool {
	d := c.cfg.DetectionPeriod
	kind := EventElect
	if g.MasterEpoch == 0 {
		kind = EventInitial
	}
	c.lead.mu.Lock()
	cands := c.lead.candidates(g, now, d, false)
	c.lead.mu.Unlock()
	epoch := g.MasterEpoch + 1
	answers := c.fence(ctx, g, epoch, cands)
	if len(answers) == 0 && kind == EventElect && (g.AllowUnclean || c.cfg.AllowUnclean) {
		c.lead.mu.Lock()
		cands = c.lead.candidates(g, now, d, true)
		c.lead.mu.Unlock()
		kind = EventUnclean
		answers = c.fence(ctx, g, epoch, cands)
	}
	if len(answers) == 0 {
		c.log.Warn("controller: no candidate answered the fence; will retry", "group", g.Name, "epoch", epoch, "candidates", len(cands))
		c.lead.mu.Lock()
		if _, ok := c.lead.noMaster[g.Name]; !ok && c.lead.noMaster != nil {
			c.lead.noMaster[g.Name] = now
		}
		c.lead.mu.Unlock()
		return false
	}
	best := slices.MaxFunc(answers, func(a, b Fenced) int {
		return cmp.Or(cmp.Compare(a.LastEpoch, b.LastEpoch), cmp.Compare(a.LogEnd, b.LogEnd), cmp.Compare(b.ID, a.ID))
	})
	cmd := &Command{TimeMillis: c.cfg.Clock.Now().UnixMilli(), Elect: &ElectMaster{Group: g.Name, ExpectEpoch: g.MasterEpoch,
		NewMaster: best.ID, Kind: kind, Fenced: answers}}
	r, err := c.apply(cmd)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		c.log.Warn("controller: election not committed", "group", g.Name, "epoch", epoch, "err", err)
		return false
	}
	c.lead.mu.Lock()
	if c.lead.noMaster != nil {
		delete(c.lead.noMaster, g.Name)
	}
	c.lead.mu.Unlock()
	level := c.log.Info
	if kind == EventUnclean {
		level = c.log.Error // acknowledged messages may be lost
	}
	level("controller: elected a master", "group", g.Name, "kind", kind, "epoch", epoch, "master", best.ID,
		"old_master", g.MasterID, "last_epoch", best.LastEpoch, "log_end", best.LogEnd, "fenced", len(answers))
	if c.cfg.NotifyRoleChange {
		c.notify(r.Group)
	}
	return true
}

// fence asks every candidate, in parallel, to promise epoch; it returns
// the answers of those that did (sorted by id).
func (c *Controller) fence(ctx context.Context, g *Group, epoch uint32, cands []Replica) []Fenced {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.FenceTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var out []Fenced
	for _, r := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.cfg.Brokers.Fence(ctx, r, FenceRequest{ClusterID: c.ClusterID(), Group: g.Name, Epoch: epoch, ReplicaID: r.ID})
			switch {
			case err != nil:
				c.log.Warn("controller: fence failed", "group", g.Name, "replica", r.ID, "epoch", epoch, "err", err)
				return
			case resp.ReplicaID != r.ID || resp.Incarnation != r.Incarnation || resp.FencedEpoch != epoch || resp.LastEpoch > epoch:
				c.log.Warn("controller: fence answer does not match", "group", g.Name, "replica", r.ID, "epoch", epoch,
					"answer_replica", resp.ReplicaID, "answer_incarnation", resp.Incarnation, "answer_fenced_epoch", resp.FencedEpoch)
				return
			}
			mu.Lock()
			out = append(out, Fenced{ID: r.ID, LastEpoch: resp.LastEpoch, LogEnd: resp.LogEnd})
			mu.Unlock()
		}()
	}
	wg.Wait()
	c.countFenced(len(out))
	slices.SortFunc(out, func(a, b Fenced) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// notify tells every replica of the group its new view (best effort; the
// brokers also learn it from their next heartbeat or poll).
func (c *Controller) notify(g *Group) {
	view := viewOf(c.ClusterID(), g)
	for _, r := range g.Replicas {
		c.spawn(func() {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.FenceTimeout)
			defer cancel()
			if err := c.cfg.Brokers.RoleChanged(ctx, *r, view); err != nil && !errors.Is(err, context.Canceled) {
				c.log.Debug("controller: role change notification failed", "group", g.Name, "replica", r.ID, "err", err)
			}
		})
	}
}
