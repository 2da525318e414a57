package main

import (
	"github.com/keelmq/keel/internal/metrics"
	"github.com/keelmq/keel/internal/replication"
)

// setReplicationState installs a group member's state: its runtime-info
// entries (GET_BROKER_RUNTIME_INFO, which `keel cluster` and the console
// read) and, through replicationStats, its metrics.
func (p *parts) setReplicationState(state func() replication.State) {
	p.replicationState = state
	p.replicationInfo = func() map[string]string { return state().RuntimeInfo() }
}

// replicationStats converts the member's state for the metrics; nil for a
// broker outside a group.
func (p *parts) replicationStats() func() metrics.ReplicationStats {
	state := p.replicationState
	if state == nil {
		return nil
	}
	return func() metrics.ReplicationStats {
		s := state()
		out := metrics.ReplicationStats{Role: s.Role, Epoch: s.Epoch, InSyncReplicas: s.InSyncReplicas,
			MasterConnected: s.Connected, MasterConfirmed: s.Confirmed, LastContact: s.LastContact}
		if s.Role == replication.RoleSyncMaster {
			out.MinInSyncReplicas = s.MinInSyncReplicas
		}
		for _, r := range s.Replicas {
			out.Replicas = append(out.Replicas, metrics.ReplicaStats{BrokerID: r.BrokerID, Acked: r.Acked,
				LagBytes: r.LagBytes, Lag: r.Lag, InSync: r.InSync, LastAck: r.LastAck})
		}
		return out
	}
}
