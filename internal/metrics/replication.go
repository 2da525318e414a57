package metrics

// Replication gauges (docs/replication.md): the member's role and epoch,
// a master's in-sync count and each connected replica's acknowledged
// offset, lag and last ack, a slave's link to its master. The log end and
// the confirmed offset are the keel_commitlog_*_offset_bytes gauges.

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReplicationStats is a replication member's state, read at scrape time
// (from replication.State; this package does not import replication).
type ReplicationStats struct {
	Role              string // SYNC_MASTER, ASYNC_MASTER or SLAVE
	Epoch             uint32
	InSyncReplicas    int // master: copies in sync, its own included
	MinInSyncReplicas int // SYNC_MASTER: copies needed to take sends (0: not exported)
	Replicas          []ReplicaStats
	// Slave only.
	MasterConnected bool
	MasterConfirmed int64     // the master's confirmed offset, as last heard
	LastContact     time.Time // zero: never
}

// ReplicaStats is one connected replica as its master sees it.
type ReplicaStats struct {
	BrokerID int64
	Acked    int64
	LagBytes int64
	Lag      time.Duration // < 0: unknown
	InSync   bool
	LastAck  time.Time // zero: none yet
}

var (
	dReplRole       = desc("keel_replication_role", "1, labelled with this broker's replication role (SYNC_MASTER, ASYNC_MASTER, SLAVE).", "role")
	dReplEpoch      = desc("keel_replication_epoch", "Newest epoch of this broker's replication epoch history.")
	dReplInSync     = desc("keel_replication_in_sync_replicas", "Master: copies in sync, its own included.")
	dReplMinInSync  = desc("keel_replication_min_in_sync_replicas", "SYNC_MASTER: copies that must be in sync for sends to be taken (minInSyncReplicas).")
	dReplAcked      = desc("keel_replication_replica_acked_offset_bytes", "Master: CommitLog offset a connected replica acknowledged (flushed for a SYNC_FLUSH replica, else written).", "replica")
	dReplLagBytes   = desc("keel_replication_replica_lag_bytes", "Master: CommitLog bytes written on the master that a connected replica has not acknowledged.", "replica")
	dReplLagSeconds = desc("keel_replication_replica_lag_seconds", "Master: age of the oldest record a connected replica has not acknowledged (0 when it holds everything).", "replica")
	dReplReplicaIn  = desc("keel_replication_replica_in_sync", "Master: 1 if a connected replica is in the in-sync set.", "replica")
	dReplLastAck    = desc("keel_replication_replica_last_ack_timestamp_seconds", "Master: time of a connected replica's last acknowledgement (Unix seconds).", "replica")
	dReplConnected  = desc("keel_replication_master_connected", "Slave: 1 while it follows its master.")
	dReplMasterConf = desc("keel_replication_master_confirmed_offset_bytes", "Slave: the master's confirmed CommitLog offset as its last frame said.")
	dReplContact    = desc("keel_replication_master_last_contact_timestamp_seconds", "Slave: time of the last frame from its master (Unix seconds).")
)

var replicationDescs = []*prometheus.Desc{dReplRole, dReplEpoch, dReplInSync, dReplMinInSync, dReplAcked, dReplLagBytes,
	dReplLagSeconds, dReplReplicaIn, dReplLastAck, dReplConnected, dReplMasterConf, dReplContact}

func (c *collector) collectReplication(ch chan<- prometheus.Metric) {
	if c.m.cfg.Replication == nil {
		return
	}
	s := c.m.cfg.Replication()
	gauge(ch, dReplRole, 1, s.Role)
	gauge(ch, dReplEpoch, float64(s.Epoch))
	if s.Role == "SLAVE" {
		gauge(ch, dReplConnected, boolGauge(s.MasterConnected))
		gauge(ch, dReplMasterConf, float64(s.MasterConfirmed))
		if !s.LastContact.IsZero() {
			gauge(ch, dReplContact, unixSeconds(s.LastContact))
		}
		return
	}
	gauge(ch, dReplInSync, float64(s.InSyncReplicas))
	if s.MinInSyncReplicas > 0 {
		gauge(ch, dReplMinInSync, float64(s.MinInSyncReplicas))
	}
	for _, r := range s.Replicas {
		id := strconv.FormatInt(r.BrokerID, 10)
		gauge(ch, dReplAcked, float64(r.Acked), id)
		gauge(ch, dReplLagBytes, float64(r.LagBytes), id)
		if r.Lag >= 0 {
			gauge(ch, dReplLagSeconds, r.Lag.Seconds(), id)
		}
		gauge(ch, dReplReplicaIn, boolGauge(r.InSync), id)
		if !r.LastAck.IsZero() {
			gauge(ch, dReplLastAck, unixSeconds(r.LastAck), id)
		}
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
