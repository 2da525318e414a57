package main

import (
	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/replication"
)

// Offsets committed on a slave travel to its master over the replication
// link (docs/replication.md, "Reads from slaves"): the slave's core keeps
// them, the slave's replication service sends them at every session, the
// master's core takes those ahead of its own.

// replicaOffsets is the slave's SlaveConfig.LocalOffsets (none before the
// core is built).
func (p *parts) replicaOffsets() []replication.OffsetReport {
	c := p.replCore.Load()
	if c == nil {
		return nil
	}
	var out []replication.OffsetReport
	for _, o := range c.ReplicaOffsets() {
		out = append(out, replication.OffsetReport{Group: o.Group, Topic: o.Topic, QueueID: o.QueueID, Offset: o.Offset})
	}
	return out
}

// mergeReplicaOffsets is the master's MasterConfig.OnReplicaOffsets.
func (p *parts) mergeReplicaOffsets(replicaID int64, offs []replication.OffsetReport) {
	c := p.replCore.Load()
	if c == nil {
		return
	}
	in := make([]core.OffsetCommit, len(offs))
	for i, o := range offs {
		in[i] = core.OffsetCommit{Group: o.Group, Topic: o.Topic, QueueID: o.QueueID, Offset: o.Offset}
	}
	n := c.MergeReplicaOffsets(in)
	p.log.Info("replication: offsets committed on a slave", "replica", replicaID, "reported", len(offs), "taken", n)
}
