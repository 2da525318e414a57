package admin

import (
	"testing"
	"time"
)

// TestGroupRuntime: runtime tables become groups; a slave gets the
// master's view of it, a connected replica that is not registered is
// listed apart, a broker outside a group has no replication state.
func TestGroupRuntime(t *testing.T) {
	master := map[string]string{
		"keelReplicationRole": "SYNC_MASTER", "keelReplicationEpoch": "3", "keelReplicationWrittenOffset": "5000",
		"keelReplicationConfirmedOffset": "4000", "keelReplicationInSyncReplicas": "1", "keelReplicationMinInSyncReplicas": "2",
		"keelReplicationReplicas":        "1,2",
		"keelReplicationReplica1Address": "10.0.0.2:4711", "keelReplicationReplica1AckedOffset": "4000",
		"keelReplicationReplica1LagBytes": "1000", "keelReplicationReplica1LagSeconds": "2.250", "keelReplicationReplica1InSync": "false",
		"keelReplicationReplica1LastAckTimestamp": "1700000000000",
		"keelReplicationReplica2Address":          "10.0.0.3:4712", "keelReplicationReplica2AckedOffset": "5000",
		"keelReplicationReplica2LagBytes": "0", "keelReplicationReplica2LagSeconds": "-1", "keelReplicationReplica2InSync": "true",
		"keelReplicationReplica2LastAckTimestamp": "0",
	}
	slave := map[string]string{"keelReplicationRole": "SLAVE", "keelReplicationEpoch": "3", "keelReplicationWrittenOffset": "4500",
		"keelReplicationConfirmedOffset": "4000", "keelReplicationMasterAddress": "10.0.0.1:10912", "keelReplicationConnected": "true",
		"keelReplicationLastContactTimestamp": "1700000000500"}
	gs := GroupRuntime([]BrokerRuntime{
		{Broker: Broker{Cluster: "c", Name: "a", ID: 0, Addr: "10.0.0.1:10911"}, Info: master},
		{Broker: Broker{Cluster: "c", Name: "a", ID: 1, Addr: "10.0.0.2:10911"}, Info: slave},
		{Broker: Broker{Cluster: "c", Name: "b", ID: 0, Addr: "10.0.0.9:10911"}, Info: map[string]string{"brokerVersion": "1"}},
	})
	if len(gs) != 2 || len(gs[0].Members) != 2 || len(gs[1].Members) != 1 {
		t.Fatalf("groups %+v", gs)
	}
	m, s := gs[0].Members[0], gs[0].Members[1]
	if m.Replication == nil || !m.Replication.InSyncShort() || m.Replication.Epoch != 3 || m.AsReplica != nil {
		t.Fatalf("master %+v", m)
	}
	if s.Replication == nil || !s.Replication.Connected || s.Replication.LastContact != time.UnixMilli(1700000000500) ||
		s.Replication.WrittenOffset != 4500 || s.Replication.MasterAddress != "10.0.0.1:10912" {
		t.Fatalf("slave %+v", s.Replication)
	}
	if r := s.AsReplica; r == nil || r.LagSeconds != 2.25 || r.LagBytes != 1000 || r.InSync || r.LastAck != time.UnixMilli(1700000000000) {
		t.Fatalf("master's view of the slave %+v", s.AsReplica)
	}
	if u := gs[0].Unregistered; len(u) != 1 || u[0].BrokerID != 2 || u[0].LagSeconds != -1 || !u[0].LastAck.IsZero() || !u[0].InSync {
		t.Fatalf("unregistered %+v", u)
	}
	if gs[1].Members[0].Replication != nil {
		t.Fatalf("a broker outside a group: %+v", gs[1].Members[0])
	}
}

// TestGroupRuntimeMasterDown: a group whose master is not registered, or
// registered but not answering, says so with what its slaves last heard
// of it; a group whose master answers, and a lone broker, do not.
func TestGroupRuntimeMasterDown(t *testing.T) {
	slave := func(contactMs string) map[string]string {
		return map[string]string{"keelReplicationRole": "SLAVE", "keelReplicationMasterAddress": "10.0.0.1:10912",
			"keelReplicationConnected": "false", "keelReplicationLastContactTimestamp": contactMs}
	}
	gs := GroupRuntime([]BrokerRuntime{
		{Broker: Broker{Cluster: "c", Name: "a", ID: 1, Addr: "10.0.0.2:10911"}, Info: slave("1700000000500")},
		{Broker: Broker{Cluster: "c", Name: "a", ID: 2, Addr: "10.0.0.3:10911"}, Info: slave("1700000000900")},
		{Broker: Broker{Cluster: "c", Name: "b", ID: 0, Addr: "10.0.1.1:10911"}, Err: "connection refused"},
		{Broker: Broker{Cluster: "c", Name: "b", ID: 1, Addr: "10.0.1.2:10911"}, Info: slave("0")},
		{Broker: Broker{Cluster: "c", Name: "c", ID: 0, Addr: "10.0.2.1:10911"}, Err: "connection refused"},
		{Broker: Broker{Cluster: "c", Name: "d", ID: 0, Addr: "10.0.3.1:10911"}, Info: map[string]string{"keelReplicationRole": "ASYNC_MASTER"}},
		{Broker: Broker{Cluster: "c", Name: "d", ID: 1, Addr: "10.0.3.2:10911"}, Info: slave("1700000000900")},
	})
	if len(gs) != 4 {
		t.Fatalf("groups %+v", gs)
	}
	if d := gs[0].MasterDown; d == nil || d.Registered || d.Address != "10.0.0.1:10912" || !d.LastHeard.Equal(time.UnixMilli(1700000000900)) {
		t.Errorf("group without a registered master: %+v", d)
	}
	if d := gs[1].MasterDown; d == nil || !d.Registered || !d.LastHeard.IsZero() {
		t.Errorf("group whose master does not answer: %+v", d)
	}
	if gs[2].MasterDown != nil || gs[3].MasterDown != nil {
		t.Errorf("a lone broker %+v, a group whose master answers %+v", gs[2].MasterDown, gs[3].MasterDown)
	}
}
