package metrics

import (
	"testing"
	"time"
)

var (
	masterReplication = ReplicationStats{Role: "SYNC_MASTER", Epoch: 4, InSyncReplicas: 1, MinInSyncReplicas: 2,
		Replicas: []ReplicaStats{
			{BrokerID: 1, Acked: 900, LagBytes: 100, Lag: 2500 * time.Millisecond, InSync: false, LastAck: time.Unix(1700000000, 0)},
			{BrokerID: 2, Acked: 1000, Lag: -1, InSync: true}, // no ack yet, lag unknown
		}}
	slaveReplication = ReplicationStats{Role: "SLAVE", Epoch: 4, MasterConnected: true, MasterConfirmed: 800,
		LastContact: time.Unix(1700000001, 500_000_000)}
)

// TestReplicationMetrics: a master's and a slave's replication state as
// gauges; what is unknown (a lag that cannot be read, no ack yet) has no
// series rather than a made-up value.
func TestReplicationMetrics(t *testing.T) {
	repl := masterReplication
	e := startEnv(t, func(c *Config) { c.Replication = func() ReplicationStats { return repl } })
	s := e.scrape()
	for series, want := range map[string]float64{
		`keel_replication_role{role="SYNC_MASTER"}`:                        1,
		`keel_replication_epoch`:                                           4,
		`keel_replication_in_sync_replicas`:                                1,
		`keel_replication_min_in_sync_replicas`:                            2,
		`keel_replication_replica_acked_offset_bytes{replica="1"}`:         900,
		`keel_replication_replica_lag_bytes{replica="1"}`:                  100,
		`keel_replication_replica_lag_seconds{replica="1"}`:                2.5,
		`keel_replication_replica_in_sync{replica="1"}`:                    0,
		`keel_replication_replica_in_sync{replica="2"}`:                    1,
		`keel_replication_replica_last_ack_timestamp_seconds{replica="1"}`: 1700000000,
		`keel_replication_replica_lag_bytes{replica="2"}`:                  0,
	} {
		if got, ok := s[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	for _, absent := range []string{`keel_replication_replica_lag_seconds{replica="2"}`,
		`keel_replication_replica_last_ack_timestamp_seconds{replica="2"}`, `keel_replication_master_connected`} {
		if _, ok := s[absent]; ok {
			t.Errorf("%s exported", absent)
		}
	}
	repl = ReplicationStats{Role: "ASYNC_MASTER", InSyncReplicas: 1}
	if _, ok := e.scrape()[`keel_replication_min_in_sync_replicas`]; ok {
		t.Error("an ASYNC_MASTER exports minInSyncReplicas (nothing is refused on it)")
	}
	repl = slaveReplication
	s = e.scrape()
	for series, want := range map[string]float64{
		`keel_replication_role{role="SLAVE"}`:                    1,
		`keel_replication_master_connected`:                      1,
		`keel_replication_master_confirmed_offset_bytes`:         800,
		`keel_replication_master_last_contact_timestamp_seconds`: 1700000001.5,
	} {
		if got, ok := s[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if _, ok := s[`keel_replication_in_sync_replicas`]; ok {
		t.Error("a slave exports an in-sync count")
	}
}
