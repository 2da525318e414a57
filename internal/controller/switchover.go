package controller

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A graceful switch-over (operator command): the master hands its role to
// an in-sync replica without losing an acknowledged write.
//
//  1. fence the master at epoch+1: it stops taking writes and answers its
//     log end L (the master must answer: a silent master is the automatic
//     election's business);
//  2. wait until the target's heartbeats report (lastEpoch, logEnd) ≥ the
//     master's (it still follows the master: it is not fenced yet);
//  3. fence the target at epoch+1 and check its answer again;
//  4. commit ElectMaster{kind switch-over}; the old master stays in the
//     in-sync set (it holds the whole log) and follows the new one.
//
// If step 2 or 3 fails, the old master is elected again at epoch+1, so
// it takes writes again (its fence promised no older master, which it
// satisfies). If even that commit fails, the master's next heartbeat
// reports a fence above its epoch and the automatic election replaces it.

// SwitchOverRequest asks the leader to move a group's master to To.
type SwitchOverRequest struct {
	Group string    `json:"group"`
	To    ReplicaID `json:"to"`
	Note  string    `json:"note,omitempty"`
}

// ErrBusy: an election of the group is running.
var ErrBusy = errors.New("controller: an election of this group is running")

// ErrSwitchOverAborted: the target did not catch up with the master in
// time; the master was elected again at the next epoch.
var ErrSwitchOverAborted = errors.New("controller: switch-over aborted")

// DefaultSwitchOverTimeout bounds the wait for the target to catch up.
const DefaultSwitchOverTimeout = 5 * time.Second

// SwitchOver runs a graceful switch-over and answers the group's view.
func (c *Controller) SwitchOver(ctx context.Context, req SwitchOverRequest) (GroupView, error) {
	if err := validName("note", req.Note, false); err != nil {
		return GroupView{}, err
	}
	if !c.acting() {
		return GroupView{}, &NotLeaderError{Leader: c.LeaderAddr()}
	}
	g := c.fsm.Group(req.Group)
	if g == nil {
		return GroupView{}, fmt.Errorf("%w: %q", ErrUnknownGroup, req.Group)
	}
	if err := c.startSwitchOver(g, req.To); err != nil {
		return GroupView{}, err
	}
	defer func() {
		c.lead.mu.Lock()
		delete(c.lead.electing, g.Name)
		c.lead.mu.Unlock()
	}()
	epoch := g.MasterEpoch + 1
	master, target := *g.Replicas[g.MasterID], *g.Replicas[req.To]
	old := c.fence(ctx, g, epoch, []Replica{master})
	if len(old) != 1 {
		return GroupView{}, c.abortSwitchOver(g, nil, fmt.Errorf("the master did not answer the fence"))
	}
	caughtUp := func(lastEpoch uint32, logEnd int64) bool {
		return lastEpoch > old[0].LastEpoch || lastEpoch == old[0].LastEpoch && logEnd >= old[0].LogEnd
	}
	if err := c.waitCaughtUp(ctx, target, caughtUp); err != nil {
		return GroupView{}, c.abortSwitchOver(g, old, err)
	}
	t := c.fence(ctx, g, epoch, []Replica{target})
	if len(t) != 1 || !caughtUp(t[0].LastEpoch, t[0].LogEnd) {
		return GroupView{}, c.abortSwitchOver(g, old, fmt.Errorf("replica %d's fence answer is behind the master's log end %d", target.ID, old[0].LogEnd))
	}
	r, err := c.applyOK(&Command{TimeMillis: c.cfg.Clock.Now().UnixMilli(), Elect: &ElectMaster{Group: g.Name, ExpectEpoch: g.MasterEpoch,
		NewMaster: target.ID, Kind: EventSwitchOver, Fenced: append(old, t...), Note: req.Note}})
	if err != nil {
		return GroupView{}, err
	}
	c.log.Info("controller: switched over", "group", g.Name, "epoch", epoch, "master", target.ID, "old_master", master.ID, "log_end", old[0].LogEnd)
	if c.cfg.NotifyRoleChange {
		c.notify(r.Group)
	}
	return viewOf(c.ClusterID(), r.Group), nil
}

// startSwitchOver checks the request against the group and the leader's
// soft state and marks the group as electing.
func (c *Controller) startSwitchOver(g *Group, to ReplicaID) error {
	now, d := c.cfg.Clock.Now(), c.cfg.DetectionPeriod
	l := &c.lead
	l.mu.Lock()
	defer l.mu.Unlock()
	switch h, ok := l.live[to]; {
	case g.MasterID == 0:
		return fmt.Errorf("%w: group %s has no master", ErrNotMaster, g.Name)
	case g.Replicas[to] == nil:
		return fmt.Errorf("%w: %d in group %s", ErrUnknownReplica, to, g.Name)
	case to == g.MasterID:
		return fmt.Errorf("%w: replica %d is the master already", ErrInvalidCommand, to)
	case !g.inSync(to):
		return fmt.Errorf("%w: replica %d of group %s", ErrNotInSync, to, g.Name)
	case !ok || now.Sub(h.at) >= d || h.incarnation != g.Replicas[to].Incarnation:
		return fmt.Errorf("%w: replica %d has not heartbeated", ErrUnknownReplica, to)
	case !l.masterAlive(g, now, d):
		return fmt.Errorf("%w: the master of group %s is not alive (the automatic election replaces it)", ErrNotMaster, g.Name)
	case l.electing[g.Name]:
		return ErrBusy
	}
	l.electing[g.Name] = true
	return nil
}

// waitCaughtUp waits (real time, at most DefaultSwitchOverTimeout) until
// the target's heartbeat satisfies ok.
func (c *Controller) waitCaughtUp(ctx context.Context, target Replica, ok func(uint32, int64) bool) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultSwitchOverTimeout)
	defer cancel()
	tick := time.NewTicker(c.cfg.ScanInterval)
	defer tick.Stop()
	for {
		c.lead.mu.Lock()
		h, seen := c.lead.live[target.ID]
		c.lead.mu.Unlock()
		if seen && h.incarnation == target.Incarnation && ok(h.lastEpoch, h.logEnd) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica %d did not catch up with the master within %v", target.ID, DefaultSwitchOverTimeout)
		case <-tick.C:
		}
	}
}

// abortSwitchOver elects the old master again at the next epoch (it was
// fenced there) and returns why the switch-over failed.
func (c *Controller) abortSwitchOver(g *Group, fenced []Fenced, why error) error {
	_, err := c.applyOK(&Command{TimeMillis: c.cfg.Clock.Now().UnixMilli(), Elect: &ElectMaster{Group: g.Name, ExpectEpoch: g.MasterEpoch,
		NewMaster: g.MasterID, Kind: EventSwitchOver, Fenced: fenced, Note: truncate("aborted: "+why.Error(), MaxNameBytes)}})
	if err != nil {
		// Not necessarily failed: raft may commit an entry whose leader
		// lost its role before it could say so. Either way the master is
		// fenced and takes no writes; if the re-election did not commit,
		// its fenced heartbeat starts an election.
		c.log.Warn("controller: switch-over aborted and the master's re-election not confirmed (if it did not commit, its fenced heartbeat starts an election)",
			"group", g.Name, "err", err)
		return fmt.Errorf("%w: %v; re-electing the master was not confirmed: %v", ErrSwitchOverAborted, why, err)
	}
	c.log.Warn("controller: switch-over aborted; the master continues at the next epoch", "group", g.Name, "epoch", g.MasterEpoch+1, "why", why)
	return fmt.Errorf("%w: %v; the master continues at epoch %d", ErrSwitchOverAborted, why, g.MasterEpoch+1)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
