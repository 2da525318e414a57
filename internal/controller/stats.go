package controller

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Figures for the metrics (internal/metrics reads them at scrape time
// through Controller.Stats; this package does not import Prometheus).
// The counters are this process's since it started: a node counts the
// elections it committed and the fences answered to it while it acted as
// leader, so the cluster's totals are the sums over the voters.

// Stats is one node's figures.
type Stats struct {
	State       string // raft's: Leader, Follower, Candidate, Shutdown
	Voter       bool   // this node is a voter of the raft configuration
	LeaderKnown bool   // this node knows a raft leader (itself or another)
	Acting      bool   // this node is the acting leader (Barrier done, cluster id checked)
	Term        uint64
	// Elections committed by this node as leader, by kind (EventInitial,
	// EventElect, EventUnclean, EventSwitchOver).
	Elections map[string]uint64
	// FencedReplicas counts the fence answers this node received as
	// leader (each a replica promising a new epoch).
	FencedReplicas uint64
	// Groups are the groups of the state machine (any node).
	Groups []GroupStats
}

// GroupStats is one group as a node sees it.
type GroupStats struct {
	Name        string
	MasterEpoch uint32
	// WithoutMasterSince is set on the acting leader only, for a group it
	// found without a live master: the master's last heartbeat, or when
	// the leader found the group so if it never heard the master (zero:
	// the group has a live master, or this node does not act).
	WithoutMasterSince time.Time
}

// statsCounters are the counters of Stats, under leaderState.mu.
type statsCounters struct {
	elections map[string]uint64
	fenced    uint64
}

func (c *Controller) countElection(kind string) {
	c.lead.mu.Lock()
	if c.lead.counts.elections == nil {
		c.lead.counts.elections = map[string]uint64{}
	}
	c.lead.counts.elections[kind]++
	c.lead.mu.Unlock()
}

func (c *Controller) countFenced(n int) {
	c.lead.mu.Lock()
	c.lead.counts.fenced += uint64(n)
	c.lead.mu.Unlock()
}

// Stats returns this node's figures (safe for concurrent use; cheap).
func (c *Controller) Stats() Stats {
	addr, _ := c.raft.LeaderWithID()
	s := Stats{State: c.raft.State().String(), LeaderKnown: addr != "", Term: c.raft.CurrentTerm()}
	if f := c.raft.GetConfiguration(); f.Error() == nil {
		for _, sv := range f.Configuration().Servers {
			if string(sv.ID) == c.cfg.NodeID && sv.Suffrage == raft.Voter {
				s.Voter = true
			}
		}
	}
	st := c.fsm.State()
	for _, g := range st.Groups {
		s.Groups = append(s.Groups, GroupStats{Name: g.Name, MasterEpoch: g.MasterEpoch})
	}
	slices.SortFunc(s.Groups, func(a, b GroupStats) int { return cmp.Compare(a.Name, b.Name) })
	c.lead.mu.Lock()
	s.Acting = c.lead.leading
	s.Elections = maps.Clone(c.lead.counts.elections)
	s.FencedReplicas = c.lead.counts.fenced
	if c.lead.leading {
		for i := range s.Groups {
			s.Groups[i].WithoutMasterSince = c.lead.down[s.Groups[i].Name]
		}
	}
	c.lead.mu.Unlock()
	return s
}
