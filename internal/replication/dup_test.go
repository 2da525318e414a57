package replication

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// fakeReplica speaks the protocol by hand: HELLO, then it acknowledges
// every range it receives as written and flushed (without storing it).
func fakeReplica(t *testing.T, addr string, id int64, segBytes int64) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	h := hello{Version: protocolVersion, BrokerName: "broker-a", BrokerID: id, SegmentBytes: segBytes, SyncFlush: true}
	if _, err := c.Write(appendFrame(nil, typeHello, h.encode())); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	typ, _, _, err := readFrame(r, DefaultMaxFrameBytes, nil)
	if err != nil || typ != typeHelloOK {
		t.Fatalf("hello answer: %d %v", typ, err)
	}
	go func() {
		var buf []byte
		for {
			typ, p, b, err := readFrame(r, DefaultMaxFrameBytes, buf)
			buf = b
			if err != nil || typ != typeData {
				return
			}
			d, err := decodeData(p)
			if err != nil {
				return
			}
			end := d.Offset + int64(len(d.Raw))
			if _, err := c.Write(appendFrame(nil, typeAck, ack{Written: end, Flushed: end}.encode())); err != nil {
				return
			}
		}
	}()
	return c
}

// TestReplicaCountsOnceWhateverItsConnections: a replica that connects
// twice (it reconnected before the master saw its old connection die) is
// one copy: with minInSyncReplicas 3 and one replica, sends stay refused.
func TestReplicaCountsOnceWhateverItsConnections(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 3)
	defer p.stopMaster()
	a := fakeReplica(t, p.addr, 1, p.master.SegmentBytes())
	defer a.Close()
	waitUntil(t, "first connection in sync", func() bool { return p.m.InSync() == 2 })
	b := fakeReplica(t, p.addr, 1, p.master.SegmentBytes())
	defer b.Close()
	// The second connection replaces the first; give it time to join.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n := p.m.InSync(); n > 2 {
			t.Fatalf("one replica counted as %d copies", n-1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := p.m.CheckSend(); r.Status != store.PutInSyncReplicasNotEnough {
		t.Fatalf("CheckSend with one replica and minInSyncReplicas 3: %v", r.Status)
	}
	c := fakeReplica(t, p.addr, 2, p.master.SegmentBytes())
	defer c.Close()
	waitUntil(t, "two replicas in sync", func() bool { return p.m.InSync() == 3 })
	if r := p.m.CheckSend(); !r.OK() {
		t.Fatalf("CheckSend with two replicas: %v %v", r.Status, r.Err)
	}
}
