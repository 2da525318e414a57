package controller

import (
	"time"
)

// Leases for ASYNC_MASTER groups. An ASYNC_MASTER acknowledges a write
// once it is durable on its own disk, before any slave has it, so fencing
// the slaves does not stop an old master that lost the controllers from
// acknowledging. Such a master asks for a lease in every heartbeat
// (HeartbeatRequest.LeaseEpoch: the epoch it is master at) and may
// acknowledge only while it holds one:
//
//   - the broker measures its lease on its own monotonic clock from the
//     moment it SENT the heartbeat the grant answers: the grant reaches it
//     later than the leader gave it, so delays only shorten the lease;
//   - the leader grants only to the group's master at its epoch and
//     elected incarnation, not fenced above its epoch, while no election
//     or switch-over of the group runs, and only after raft confirmed it
//     is still the leader (VerifyLeader: a newer leader took over after
//     that moment, and waits a full detection period before its first
//     election, longer than a lease and its margin);
//   - the leader records the grant as ending LeaseDuration after it gave
//     it (Clock time) and starts no election of the group before that end
//     plus LeaseMargin (clocks running at slightly different rates on the
//     two machines).
//
// So by the time a new master is elected, the old one's lease has ended
// on its own clock, whatever the network did to its heartbeats.

// LeaseMargin is the wait beyond a lease's end the leader adds before it
// elects a new master: a tenth of the lease, far above the rate
// difference of two clocks (NTP keeps it below 0.05 %).
func LeaseMargin(lease time.Duration) time.Duration { return lease / 10 }

// leaseGrant is the newest lease the leader granted to a group's master.
type leaseGrant struct {
	replica ReplicaID
	epoch   uint32
	until   time.Time // Clock time the lease ends, from the leader's side
}

// leaseHeldLocked reports whether the group's newest lease (plus its
// margin) has not ended at now, and when it ends.
func (l *leaseState) leaseHeldLocked(group string, now time.Time) (bool, time.Time) {
	g, ok := l.grants[group]
	if !ok {
		return false, time.Time{}
	}
	end := g.until.Add(l.margin)
	return now.Before(end), end
}

// leaseState is the part of the leader's soft state about leases (under
// leaderState.mu).
type leaseState struct {
	grants map[string]leaseGrant // by group
	margin time.Duration
	// waiting: groups whose election waits for a lease to end (logged
	// once per wait).
	waiting map[string]bool
}

// grantLease decides, for a heartbeat of replica r asking for a lease at
// epoch, whether the leader grants it, and records the grant. It reports
// the lease granted (0: none).
func (c *Controller) grantLease(g *Group, req HeartbeatRequest) time.Duration {
	if req.LeaseEpoch == 0 || req.LeaseEpoch != g.MasterEpoch || req.ReplicaID != g.MasterID || req.FencedEpoch > g.MasterEpoch {
		return 0
	}
	member := false
	for _, m := range g.InSync {
		member = member || m.ID == req.ReplicaID && m.Incarnation == req.Incarnation
	}
	if !member {
		return 0 // a restarted master: it is elected again first
	}
	ok := func() (uint64, bool) {
		c.lead.mu.Lock()
		defer c.lead.mu.Unlock()
		return c.lead.term, c.lead.leading && !c.lead.electing[g.Name]
	}
	term, can := ok()
	if !can {
		return 0
	}
	// Raft confirms that no newer leader has taken over: one that did
	// after this point waits a detection period before electing.
	if err := c.raft.VerifyLeader().Error(); err != nil {
		return 0
	}
	l := &c.lead
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading || l.term != term || l.electing[g.Name] || l.leases.grants == nil {
		return 0
	}
	// Read again under the lock: an election that committed since the
	// first read ran while electing was set, and is seen here.
	if cur := c.fsm.Group(g.Name); cur == nil || cur.MasterEpoch != req.LeaseEpoch || cur.MasterID != req.ReplicaID {
		return 0
	}
	d := c.cfg.LeaseDuration
	l.leases.grants[g.Name] = leaseGrant{replica: req.ReplicaID, epoch: req.LeaseEpoch, until: c.cfg.Clock.Now().Add(d)}
	return d
}
