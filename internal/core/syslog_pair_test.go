package core

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/replication"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

func pairStoreConfig(fs vfs.FS) store.Config {
	cfg := store.DefaultConfig("/data")
	cfg.FS = fs
	cfg.CommitLogSegmentBytes = 1 << 20
	cfg.MaxMessageBytes = 512 << 10
	cfg.ConsumeQueueSegmentEntries = 100
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 64, 1000
	cfg.FlushInterval = 10 * time.Millisecond
	cfg.FlushConsumeQueueInterval = 50 * time.Millisecond
	cfg.RetentionCheckInterval = time.Hour
	cfg.DiskReserveBytes = 0
	cfg.FlushDiskType = store.SyncFlush
	return cfg
}

// corePair is a SYNC_MASTER core and a slave core over loopback
// replication, each on its own MemFS.
type corePair struct {
	masterFS, slaveFS *vfs.MemFS
	mst, sst          *store.Store
	master, slave     *Broker
	stop              []func()
}

func (p *corePair) close() {
	for i := len(p.stop) - 1; i >= 0; i-- {
		p.stop[i]()
	}
}

func coreConfig(fs vfs.FS, systemRecords bool) Config {
	return Config{DataDir: "/data", FS: fs, AutoCreateTopicEnable: true, AutoCreateSubscriptionGroup: true, SystemRecords: systemRecords}
}

func startCorePair(t *testing.T) *corePair {
	t.Helper()
	p := &corePair{masterFS: vfs.NewMem(), slaveFS: vfs.NewMem()}
	mcfg := pairStoreConfig(p.masterFS)
	mcfg.ExternalReplication = true
	mcfg.ReplicationTimeout = 2 * time.Second
	mst, err := store.Open(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	p.mst = mst
	p.stop = append(p.stop, func() { mst.Close() })
	m, err := replication.NewMaster(replication.MasterConfig{Store: mst, FS: p.masterFS, DataDir: "/data", BrokerName: "broker-a",
		Sync: true, MinInSyncReplicas: 2, AckTimeout: time.Second, HeartbeatInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Serve(ctx, ln); close(done) }()
	p.stop = append(p.stop, func() { cancel(); <-done })

	scfg := pairStoreConfig(p.slaveFS)
	scfg.Replica = true
	sst, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	p.sst = sst
	p.stop = append(p.stop, func() { sst.Close() })
	s, err := replication.NewSlave(replication.SlaveConfig{Store: sst, FS: p.slaveFS, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: ln.Addr().String(), SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	sdone := make(chan struct{})
	go func() { s.Run(sctx); close(sdone) }()
	p.stop = append(p.stop, func() { scancel(); <-sdone })
	waitFor(t, "slave in sync", func() bool { return m.InSync() == 2 })

	// The slave's core first: the master's start (built-in topics) must
	// reach it as any later change does.
	if p.slave, err = New(coreConfig(p.slaveFS, true), sst, nil); err != nil {
		t.Fatal(err)
	}
	if p.master, err = New(coreConfig(p.masterFS, true), mst, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sameTables waits until the slave's topics, groups and offsets equal the
// master's (DataVersions included), failing with the difference.
func (p *corePair) sameTables(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mt, mtv := p.master.TopicTable()
		st, stv := p.slave.TopicTable()
		mg, mgv := p.master.GroupTable()
		sg, sgv := p.slave.GroupTable()
		mo, so := p.master.OffsetsByTopic(), p.slave.OffsetsByTopic()
		if reflect.DeepEqual(mt, st) && mtv == stv && reflect.DeepEqual(mg, sg) && mgv == sgv && reflect.DeepEqual(mo, so) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the slave's metadata differs from the master's:\ntopics %v %+v\n    vs %v %+v\ngroups %v %+v\n    vs %v %+v\noffsets %v\n     vs %v",
				what, mtv, mt, stv, st, mgv, mg, sgv, sg, mo, so)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestSystemRecordsReachTheSlaveExactly: every kind of metadata change on
// a master serving slaves reaches the slave's core exactly (same entries,
// same DataVersions), through the CommitLog alone.
func TestSystemRecordsReachTheSlaveExactly(t *testing.T) {
	p := startCorePair(t)
	defer p.close()
	p.sameTables(t, "start")

	steps := []struct {
		kind string
		do   func() error
	}{
		{"topic config change", func() error {
			if _, err := p.master.EnsureTopic("orders", 4, PermRW); err != nil {
				return err
			}
			tc, _ := p.master.Topic("orders")
			tc.WriteQueueNums, tc.Order = 2, true
			return p.master.UpdateTopic(tc)
		}},
		{"subscription group change", func() error {
			if _, err := p.master.EnsureGroup("billing"); err != nil {
				return err
			}
			g, _ := p.master.Group("billing")
			g.RetryMaxTimes, g.ConsumeBroadcastEnable = 3, true
			return p.master.UpdateGroup(g)
		}},
		{"offset commit", func() error {
			for q := range int32(4) {
				if err := p.master.CommitOffset("billing", "orders", q, int64(10+q)); err != nil {
					return err
				}
			}
			p.master.RecordOffset("audit", "orders", 1, 99)
			return p.master.FlushOffsets()
		}},
		{"offsets coalesced", func() error {
			for off := range int64(50) {
				if err := p.master.CommitOffset("billing", "orders", 0, 100+off); err != nil {
					return err
				}
			}
			return p.master.FlushOffsets()
		}},
		{"one queue's offset delete", func() error {
			if !p.master.DeleteOffset("billing", "orders", 3) {
				return errors.New("no offset to delete")
			}
			return p.master.FlushOffsets()
		}},
		{"subscription group delete", func() error { return p.master.DeleteGroup("audit") }},
		{"topic delete", func() error {
			if _, err := p.master.EnsureTopic("scratch", 1, PermRW); err != nil {
				return err
			}
			if err := p.master.CommitOffset("billing", "scratch", 0, 5); err != nil {
				return err
			}
			if err := p.master.FlushOffsets(); err != nil {
				return err
			}
			return p.master.DeleteTopic("scratch")
		}},
		{"group delete with offsets", func() error { return p.master.DeleteGroup("billing") }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.kind, err)
		}
		p.sameTables(t, s.kind)
	}
	if _, ok := p.slave.Topic("scratch"); ok {
		t.Error("the deleted topic is still on the slave")
	}
	if off := p.slave.OffsetsByTopic(); len(off) != 0 {
		t.Errorf("offsets left on the slave after the group was deleted: %v", off)
	}
}

// TestSlaveMetadataSurvivesItsRestart: the slave writes what it applied
// to its own files with the snapshot point, and after a restart (power
// loss of its MemFS included) it replays only what follows the point and
// still equals the master.
func TestSlaveMetadataSurvivesItsRestart(t *testing.T) {
	p := startCorePair(t)
	defer p.close()
	if _, err := p.master.EnsureTopic("orders", 2, PermRW); err != nil {
		t.Fatal(err)
	}
	if err := p.master.CommitOffset("g", "orders", 1, 7); err != nil {
		t.Fatal(err)
	}
	if err := p.master.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	p.sameTables(t, "before")
	if err := p.slave.FlushOffsets(); err != nil { // the slave's snapshot
		t.Fatal(err)
	}
	data, ok, err := readFile(p.slaveFS, "/data/config/consumerOffset.json")
	if err != nil || !ok || !containsLogOffset(data) {
		t.Fatalf("slave's offsets file has no snapshot point: %s %v", data, err)
	}
	// A change after the slave's snapshot: only the log has it.
	if err := p.master.CommitOffset("g", "orders", 1, 8); err != nil {
		t.Fatal(err)
	}
	if err := p.master.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	p.sameTables(t, "after")
	reopened, err := New(coreConfig(p.slaveFS, true), p.sst, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.slave = reopened
	p.sameTables(t, "slave core reopened")
}

func containsLogOffset(data []byte) bool { return strings.Contains(string(data), `"keelLogOffset":`) }

// failRenameFS fails the renames into place of files named target.
type failRenameFS struct {
	vfs.FS
	target atomic.Value // string; "" = none
}

func (f *failRenameFS) Rename(oldname, newname string) error {
	if t, _ := f.target.Load().(string); t != "" && strings.HasSuffix(newname, t) {
		return errGate
	}
	return f.FS.Rename(oldname, newname)
}

// TestMasterReplaysTheLogFromItsSnapshotPoints: a master whose metadata
// files were not written after a change it logged (a crash between the
// append and the file, shown by failing the file's rename, then a power
// loss) gets the change back from the CommitLog at its next start; and a
// record before a file's snapshot point is not applied again (the file
// is newer than it).
func TestMasterReplaysTheLogFromItsSnapshotPoints(t *testing.T) {
	mem := vfs.NewMem()
	fs := &failRenameFS{FS: mem}
	open := func(fsys vfs.FS, systemRecords bool) (*store.Store, *Broker) {
		t.Helper()
		st, err := store.Open(pairStoreConfig(fsys))
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(coreConfig(fsys, systemRecords), st, nil)
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		return st, b
	}
	st, b := open(fs, true)
	if _, err := b.EnsureTopic("orders", 2, PermRW); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitOffset("g", "orders", 0, 5); err != nil {
		t.Fatal(err)
	}
	if err := b.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	// Logged, but the files are not replaced.
	fs.target.Store("consumerOffset.json")
	if err := b.CommitOffset("g", "orders", 0, 6); err != nil {
		t.Fatal(err)
	}
	if err := b.FlushOffsets(); err == nil {
		t.Fatal("the offsets file was written")
	}
	fs.target.Store("topics.json")
	tc, _ := b.Topic("orders")
	tc.WriteQueueNums = 1
	if err := b.UpdateTopic(tc); err == nil {
		t.Fatal("the topics file was written")
	}
	if got, _ := b.Topic("orders"); got.WriteQueueNums != 1 {
		t.Fatalf("a change the log holds was dropped from memory: %+v", got)
	}
	fs.target.Store("")
	crashed := mem.CrashClone()
	st.Close()

	st, b = open(crashed, false)
	if off, _ := b.ConsumerOffset("g", "orders", 0, false); off != 6 {
		t.Errorf("offset after the restart %d, want 6 (from the log)", off)
	}
	if got, _ := b.Topic("orders"); got.WriteQueueNums != 1 {
		t.Errorf("topic after the restart %+v, want 1 write queue (from the log)", got)
	}
	// Without system records (a single broker) a change goes to the file
	// only, which moves on past the record of 6.
	if err := b.CommitOffset("g", "orders", 0, 3); err != nil {
		t.Fatal(err)
	}
	if err := b.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, b = open(crashed, true)
	defer st.Close()
	if off, _ := b.ConsumerOffset("g", "orders", 0, false); off != 3 {
		t.Errorf("offset %d, want 3: a record before the file's snapshot point was applied again", off)
	}
}

// TestReplicaOffsetsReachTheMaster: an offset committed on the slave is
// kept there durably (it survives a restart of the slave's core), served
// in preference to the replicated one, taken by the master only if ahead
// of its own, and dropped on the slave once the master's record confirms
// it.
func TestReplicaOffsetsReachTheMaster(t *testing.T) {
	p := startCorePair(t)
	defer p.close()
	if _, err := p.master.EnsureTopic("orders", 2, PermRW); err != nil {
		t.Fatal(err)
	}
	for q, off := range []int64{10, 20} {
		if err := p.master.CommitOffset("g", "orders", int32(q), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.master.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	p.sameTables(t, "before")

	// The master is unreachable for the client: it commits to the slave,
	// one queue ahead and one behind the master's offset.
	for q, off := range []int64{15, 18} {
		if err := p.slave.CommitOffset("g", "orders", int32(q), off); err != nil {
			t.Fatal(err)
		}
	}
	if off, _ := p.slave.ConsumerOffset("g", "orders", 0, false); off != 15 {
		t.Fatalf("slave serves offset %d, want its own commit 15", off)
	}
	if err := p.slave.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	reopened, err := New(coreConfig(p.slaveFS, true), p.sst, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.slave = reopened
	reported := p.slave.ReplicaOffsets()
	if len(reported) != 2 {
		t.Fatalf("after a restart the slave reports %+v, want its two commits", reported)
	}

	if n := p.master.MergeReplicaOffsets(reported); n != 1 {
		t.Fatalf("master took %d offsets, want 1 (the other is behind its own)", n)
	}
	if off, _ := p.master.ConsumerOffset("g", "orders", 0, false); off != 15 {
		t.Errorf("master offset of queue 0 %d, want 15 from the slave", off)
	}
	if off, _ := p.master.ConsumerOffset("g", "orders", 1, false); off != 20 {
		t.Errorf("master offset of queue 1 %d, want its own 20 (ahead of the slave's)", off)
	}
	if err := p.master.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the slave's commit confirmed", func() bool {
		left := p.slave.ReplicaOffsets()
		return len(left) == 1 && left[0].QueueID == 1
	})
	// Queue 1's local entry (18) stays until the master moves past it.
	if err := p.master.CommitOffset("g", "orders", 1, 21); err != nil {
		t.Fatal(err)
	}
	if err := p.master.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every slave commit confirmed", func() bool { return len(p.slave.ReplicaOffsets()) == 0 })
	p.sameTables(t, "after")
}

// TestDelayProgressReachesTheSlave: the schedule service's cursors, logged
// by the master, reach the slave's core and are written there in the
// service's own cursor file (with the snapshot point), so a slave made
// master would resume the deliveries where they were.
func TestDelayProgressReachesTheSlave(t *testing.T) {
	p := startCorePair(t)
	defer p.close()
	want := map[string]map[int32]int64{"SCHEDULE_TOPIC_XXXX": {2: 40, 5: 1}, "KEEL_SYS_TIMER": {0: 7}}
	if err := p.master.LogDelayProgress(want); err != nil {
		t.Fatal(err)
	}
	want["SCHEDULE_TOPIC_XXXX"][2] = 41
	if err := p.master.LogDelayProgress(want); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cursors on the slave", func() bool { return reflect.DeepEqual(p.slave.DelayProgress(), want) })
	if err := p.slave.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	data, ok, err := readFile(p.slaveFS, "/data/config/delayOffset.json")
	if err != nil || !ok {
		t.Fatalf("no cursor file on the slave: %v", err)
	}
	var f struct {
		Version     int                         `json:"version"`
		OffsetTable map[string]map[string]int64 `json:"offsetTable"`
	}
	if err := json.Unmarshal(data, &f); err != nil || f.Version != 1 || f.OffsetTable["SCHEDULE_TOPIC_XXXX"]["2"] != 41 ||
		f.OffsetTable["KEEL_SYS_TIMER"]["0"] != 7 || !containsLogOffset(data) {
		t.Fatalf("slave's cursor file %s (%v)", data, err)
	}
	reopened, err := New(coreConfig(p.slaveFS, true), p.sst, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := reopened.DelayProgress(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a restart the slave has %v, want %v", got, want)
	}
}

// TestSnapshotPointBeyondTheLogIsPulledBack: a file whose snapshot point
// lies beyond the log's end (the log lost a tail the file had seen) does
// not hide the records written there after the restart.
func TestSnapshotPointBeyondTheLogIsPulledBack(t *testing.T) {
	mem := vfs.NewMem()
	fs := &failRenameFS{FS: mem}
	st, err := store.Open(pairStoreConfig(fs))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(coreConfig(fs, true), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.EnsureTopic("orders", 1, PermRW); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitOffset("g", "orders", 0, 5); err != nil {
		t.Fatal(err)
	}
	if err := b.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	// The file says it saw far more of the log than there is.
	path := "/data/config/consumerOffset.json"
	data, _, _ := readFile(mem, path)
	data = regexp.MustCompile(`"keelLogOffset":\d+`).ReplaceAll(data, []byte(`"keelLogOffset":1000000`))
	if err := vfs.WriteFileDurable(mem, path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err = store.Open(pairStoreConfig(fs)); err != nil {
		t.Fatal(err)
	}
	if b, err = New(coreConfig(fs, true), st, nil); err != nil {
		t.Fatal(err)
	}
	fs.target.Store("consumerOffset.json") // logged, the file not written
	if err := b.CommitOffset("g", "orders", 0, 9); err != nil {
		t.Fatal(err)
	}
	b.FlushOffsets()
	fs.target.Store("")
	crashed := mem.CrashClone()
	st.Close()
	if st, err = store.Open(pairStoreConfig(crashed)); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if b, err = New(coreConfig(crashed, true), st, nil); err != nil {
		t.Fatal(err)
	}
	if off, _ := b.ConsumerOffset("g", "orders", 0, false); off != 9 {
		t.Fatalf("offset %d after the restart, want 9 from the log", off)
	}
}

// TestFirstRecordsOfAMasterAreReplayed: a broker that ran without system
// records (its files have no snapshot point, and it reads nothing at
// start) and then starts as a master serving slaves gets its first
// records back after a crash before any file had a point.
func TestFirstRecordsOfAMasterAreReplayed(t *testing.T) {
	mem := vfs.NewMem()
	fs := &failRenameFS{FS: mem}
	st, err := store.Open(pairStoreConfig(fs))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(coreConfig(fs, false), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.EnsureTopic("orders", 1, PermRW); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitOffset("g", "orders", 0, 5); err != nil {
		t.Fatal(err)
	}
	if err := b.FlushOffsets(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if data, _, _ := readFile(mem, "/data/config/consumerOffset.json"); containsLogOffset(data) {
		t.Fatalf("a broker without system records wrote a point: %s", data)
	}
	if st, err = store.Open(pairStoreConfig(fs)); err != nil {
		t.Fatal(err)
	}
	if b, err = New(coreConfig(fs, true), st, nil); err != nil {
		t.Fatal(err)
	}
	fs.target.Store("consumerOffset.json") // the first record logged, its file not written
	if err := b.CommitOffset("g", "orders", 0, 6); err != nil {
		t.Fatal(err)
	}
	b.FlushOffsets()
	fs.target.Store("")
	crashed := mem.CrashClone()
	st.Close()
	if st, err = store.Open(pairStoreConfig(crashed)); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if b, err = New(coreConfig(crashed, true), st, nil); err != nil {
		t.Fatal(err)
	}
	if off, _ := b.ConsumerOffset("g", "orders", 0, false); off != 6 {
		t.Fatalf("offset %d after the restart, want 6 from the log", off)
	}
}
