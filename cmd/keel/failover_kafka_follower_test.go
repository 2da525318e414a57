package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/controller"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rackFailoverCluster starts three controllers, a NameServer and a group
// of three brokers in controller mode, member i in rack "rack<i>" with a
// Kafka door and an HTTP listener, every port chosen now; it returns the
// brokers, their Kafka and HTTP addresses, a function reading the group
// from the controllers and the controllers' addresses.
func rackFailoverCluster(t *testing.T) ([]*failoverBroker, []string, []string, func() *controller.Group, []string) {
	t.Helper()
	ports := reserveLoopbackPorts(t, 3+1+3*4)
	ctrl, nsAddr := ports[:3], ports[3]
	confDir := t.TempDir()
	cconf := filepath.Join(confDir, "controller.conf")
	if err := os.WriteFile(cconf, []byte("controllerHeartBeatTimeoutMills=2000\nscanInactiveMasterInterval=200\ncontrollerFenceTimeoutMillis=1000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startControllerProc(t, t.TempDir(), ctrl[0], "-c", cconf, "--bootstrap="+strings.Join(ctrl, ","))
	for i := 1; i < 3; i++ {
		startControllerProc(t, t.TempDir(), ctrl[i], "-c", cconf)
	}
	waitFor(t, "an acting controller leader", 30*time.Second, func() bool {
		st, ok := controllerStatus(t, ctrl)
		return ok && st.Acting && len(st.Voters) == 3
	})
	startKeelProc(t, "namesrv", "--namesrv-listen", nsAddr)
	brokers := make([]*failoverBroker, 3)
	kafkaAddrs, httpAddrs := make([]string, 3), make([]string, 3)
	for i := range brokers {
		bconf := filepath.Join(confDir, fmt.Sprintf("broker-%d.conf", i))
		if err := os.WriteFile(bconf, []byte("brokerClusterName=FollowerCluster\nbrokerName=broker-a\nbrokerRole=SYNC_MASTER\n"+
			"enableControllerMode=true\ncontrollerAddr="+strings.Join(ctrl, ";")+"\nminInSyncReplicas=2\nflushDiskType=SYNC_FLUSH\n"+
			"replicaAckTimeoutMillis=2000\namqpListen=\nbrokerIP1=127.0.0.1\nkafkaBrokerRack=rack"+strconv.Itoa(i)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		b := &failoverBroker{dir: t.TempDir(), addr: ports[4+4*i]}
		kafkaAddrs[i], httpAddrs[i] = ports[6+4*i], ports[7+4*i]
		b.args = []string{"broker", "-c", bconf, "--data-dir", b.dir, "-n", nsAddr, "--broker-listen", b.addr,
			"--ha-listen", ports[5+4*i], "--kafka-listen", kafkaAddrs[i], "--http-listen", httpAddrs[i]}
		b.proc = startKeelProc(t, b.args...)
		brokers[i] = b
	}
	return brokers, kafkaAddrs, httpAddrs, groupFromControllers(t, ctrl, "broker-a"), ctrl
}

// TestControllerFollowerFetch: follower fetching in controller mode, in
// real processes on loopback. A group of three controller-mode members,
// each in a rack of its own with a Kafka door. While a member is a slave
// its door is the consumer-only one: Metadata lists it with its rack, a
// franz-go consumer with that client.rack reads the partition from it
// (its metrics count the deliveries), a produce there answers
// NOT_LEADER_OR_FOLLOWER and a fetch past its high watermark
// OFFSET_NOT_AVAILABLE. The master is killed with SIGKILL while a
// producer and that consumer run: the controllers elect another member,
// whose door now takes produces, and the consumer reads every
// acknowledged record, each offset once and none skipped. The killed
// master, restarted, returns as a slave: its door refuses produces
// (NOT_LEADER_OR_FOLLOWER, storing nothing), its high watermark is never
// above the new master's, and a consumer in its rack reads every record
// from it. Last, a switch-over makes it master again: its door takes
// produces, and the master it replaced, now a slave, refuses them and
// serves a consumer of its rack every record.
func TestControllerFollowerFetch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes")
	}
	brokers, kafkaAddrs, httpAddrs, group, ctrl := rackFailoverCluster(t)
	g := waitMasterElected(t, brokers, group)
	memberOf := func(id controller.ReplicaID) int { return brokerOf(t, brokers, g, id) }
	oldMasterID, firstEpoch := g.MasterID, g.MasterEpoch
	oldMaster := memberOf(oldMasterID)
	var slaveID controller.ReplicaID
	for id := range g.Replicas {
		if id != oldMasterID && (slaveID == 0 || id < slaveID) {
			slaveID = id
		}
	}
	slave := memberOf(slaveID)
	rackOf := func(i int) string { return "rack" + strconv.Itoa(i) }
	t.Logf("master: replica %d (broker %d, %s) at epoch %d; the consumer's slave: replica %d (broker %d, %s)",
		oldMasterID, oldMaster, rackOf(oldMaster), firstEpoch, slaveID, slave, rackOf(slave))
	ok := false
	defer func() {
		if !ok {
			dumpBrokers(t, brokers)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Second)
	defer cancel()
	const topic = "FollowerK"
	mc, err := remoting.Dial(ctx, brokers[oldMaster].addr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.CreateTopic(ctx, mc, topic, 1); err != nil {
		t.Fatal(err)
	}
	mc.Close()

	// Metadata at the master: the slave is a broker (its door open) in
	// its rack, and in the partition's ISR.
	lastMetadata := ""
	listed := func(at int, leader controller.ReplicaID, follower int, followerID controller.ReplicaID) bool {
		md, err := kafkaMetadata(ctx, kafkaAddrs[at], topic)
		if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 1 {
			lastMetadata = fmt.Sprintf("%+v %v", md, err)
			return false
		}
		lastMetadata = fmt.Sprintf("brokers %+v partitions %+v", md.Brokers, md.Topics[0].Partitions)
		p := md.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.Leader != int32(leader) || !slices.Contains(p.ISR, int32(followerID)) {
			return false
		}
		for _, b := range md.Brokers {
			if b.NodeID == int32(followerID) {
				return b.Rack != nil && *b.Rack == rackOf(follower) && b.Host+":"+strconv.Itoa(int(b.Port)) == kafkaAddrs[follower]
			}
		}
		return false
	}
	waitUntil := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; last Metadata: %s", what, lastMetadata)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitUntil("Metadata listing the slave's door with its rack, in sync", 30*time.Second, func() bool {
		return listed(oldMaster, oldMasterID, slave, slaveID)
	})

	waitFor(t, "every door's Metadata naming the master as the partition's leader", 30*time.Second, func() bool {
		for i := range brokers {
			md, err := kafkaMetadata(ctx, kafkaAddrs[i], topic)
			if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 1 || md.Topics[0].Partitions[0].ErrorCode != 0 ||
				md.Topics[0].Partitions[0].Leader != int32(oldMasterID) {
				return false
			}
		}
		return true
	})

	prod, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
		kgo.ProduceRequestTimeout(3*time.Second), kgo.RequestTimeoutOverhead(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var mu sync.Mutex
	acked := map[int64]string{} // offset -> value
	var produceErrs []string
	seq := 0
	produce := func() {
		val := fmt.Sprintf("rec-%06d", seq)
		seq++
		r := &kgo.Record{Topic: topic, Partition: 0, Value: []byte(val)}
		res := prod.ProduceSync(ctx, r)
		mu.Lock()
		defer mu.Unlock()
		if err := res.FirstErr(); err != nil {
			produceErrs = append(produceErrs, fmt.Sprintf("%s: %v", val, err))
			return
		}
		if prev, dup := acked[r.Offset]; dup {
			t.Errorf("offset %d acknowledged for %s and for %s", r.Offset, prev, val)
		}
		acked[r.Offset] = val
	}
	const first = 50
	for range first {
		produce()
	}
	if len(acked) != first {
		t.Fatalf("%d of %d acknowledged before the kill: %v", len(acked), first, produceErrs)
	}

	// The consumer in the slave's rack.
	series := `keel_deliver_messages_total{door="kafka",topic="` + topic + `"}`
	cons, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs...), kgo.Rack(rackOf(slave)),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var cmu sync.Mutex
	read := map[int64]string{} // offset -> value, as the consumer got them
	var order []int64          // offsets in the order delivered
	poll := func(pctx context.Context) {
		fs := cons.PollFetches(pctx)
		cmu.Lock()
		defer cmu.Unlock()
		fs.EachRecord(func(r *kgo.Record) {
			if prev, seen := read[r.Offset]; seen {
				t.Errorf("offset %d delivered twice (%s, then %s)", r.Offset, prev, r.Value)
			}
			read[r.Offset] = string(r.Value)
			order = append(order, r.Offset)
		})
	}
	readCount := func() int { cmu.Lock(); defer cmu.Unlock(); return len(read) }
	for readCount() < first && ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		poll(pctx)
		pcancel()
	}
	if d := metricValue(t, httpAddrs[slave], series); d < first {
		t.Errorf("the slave delivered %v records of %s, want %d (the consumer in its rack reads from it)", d, topic, first)
	}
	t.Logf("deliveries before the kill: slave %v, master %v", metricValue(t, httpAddrs[slave], series), metricValue(t, httpAddrs[oldMaster], series))

	// Raw requests to the slave's door: it takes no produce, and a fetch
	// past its high watermark waits for the master's confirmation.
	tryFetchRack := func(node controller.ReplicaID, off int64, rack string) (kmsg.FetchResponseTopicPartition, error) {
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes = 1 << 20
		if rack != "" {
			req.Rack = rack
		}
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = topic
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = 0, off, 1<<20, -1, -1
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		resp, err := req.RequestWith(ctx, prod.Broker(int(node)))
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return kmsg.FetchResponseTopicPartition{}, fmt.Errorf("fetch at node %d: %+v %v", node, resp, err)
		}
		return resp.Topics[0].Partitions[0], nil
	}
	tryFetchAt := func(node controller.ReplicaID, off int64) (kmsg.FetchResponseTopicPartition, error) {
		return tryFetchRack(node, off, "")
	}
	fetchAt := func(node controller.ReplicaID, off int64) kmsg.FetchResponseTopicPartition {
		t.Helper()
		// A connection to a door closed by a role change fails once.
		var p kmsg.FetchResponseTopicPartition
		var err error
		for range 3 {
			if p, err = tryFetchAt(node, off); err == nil {
				return p
			}
		}
		t.Fatal(err)
		return p
	}
	produceAt := func(node controller.ReplicaID) int16 {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = 0, oneRecordBatch([]byte("to a slave"))
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		var resp *kmsg.ProduceResponse
		var err error
		for range 3 { // a connection to a door closed by a role change fails once
			if resp, err = req.RequestWith(ctx, prod.Broker(int(node))); err == nil {
				return resp.Topics[0].Partitions[0].ErrorCode
			}
		}
		t.Fatalf("produce at node %d: %v", node, err)
		return 0
	}
	if code := produceAt(slaveID); code != errNotLeaderCode {
		t.Errorf("produce to the slave: code %d, want %d (NOT_LEADER_OR_FOLLOWER)", code, errNotLeaderCode)
	}
	if p := fetchAt(slaveID, first+10); p.ErrorCode != 78 {
		t.Errorf("fetch past the slave's high watermark: code %d, want 78 (OFFSET_NOT_AVAILABLE)", p.ErrorCode)
	}
	if m, s := fetchAt(oldMasterID, 0), fetchAt(slaveID, 0); s.ErrorCode != 0 || s.HighWatermark > m.HighWatermark || m.HighWatermark != first {
		t.Errorf("high watermarks: slave %d (code %d), master %d (code %d); want the slave's at most the master's %d",
			s.HighWatermark, s.ErrorCode, m.HighWatermark, m.ErrorCode, first)
	}

	// The producer and the consumer run across the master's kill.
	cctx, ccancel := context.WithCancel(ctx)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for cctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(cctx, time.Second)
			poll(pctx)
			pcancel()
		}
	}()
	defer func() { ccancel(); <-consumed }()
	stop := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for {
			select {
			case <-stop:
				return
			default:
			}
			produce()
		}
	}()
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	waitFor(t, "30 more records acknowledged before the kill", 30*time.Second, func() bool { return ackedCount() >= first+30 })
	if err := brokers[oldMaster].proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-brokers[oldMaster].proc.exited
	before := ackedCount()
	waitFor(t, "a new master elected", 30*time.Second, func() bool {
		g = group()
		return g != nil && g.MasterID != 0 && g.MasterID != oldMasterID && g.MasterEpoch > firstEpoch
	})
	newMasterID := g.MasterID
	newMaster := memberOf(newMasterID)
	t.Logf("new master: replica %d (broker %d) at epoch %d", newMasterID, newMaster, g.MasterEpoch)
	waitFor(t, "50 records acknowledged after the kill", 60*time.Second, func() bool { return ackedCount() >= before+50 })
	close(stop)
	<-produced

	// Every acknowledged record read, each offset once, from 0 on with
	// no gap.
	mu.Lock()
	want := make(map[int64]string, len(acked))
	for off, v := range acked {
		want[off] = v
	}
	errsAfter := slices.Clone(produceErrs)
	mu.Unlock()
	for _, e := range errsAfter {
		t.Logf("produce error (not acknowledged): %s", e)
	}
	var top int64 = -1
	for off := range want {
		top = max(top, off)
	}
	waitFor(t, "the consumer reading every acknowledged record", 60*time.Second, func() bool {
		cmu.Lock()
		defer cmu.Unlock()
		for off, v := range want {
			if read[off] != v {
				return false
			}
		}
		return true
	})
	ccancel()
	<-consumed
	cmu.Lock()
	for i, off := range order {
		if off != int64(i) {
			t.Errorf("delivery %d was offset %d: the consumer skipped or went back", i, off)
			break
		}
	}
	cmu.Unlock()

	// The killed master returns, as a slave of the new one, with its
	// consumer-only door.
	brokers[oldMaster].proc = startKeelProc(t, brokers[oldMaster].args...)
	waitUntil("Metadata at the new master listing the returned member's door with its rack, in sync", 60*time.Second, func() bool {
		return listed(newMaster, newMasterID, oldMaster, oldMasterID)
	})
	if g := group(); g == nil || g.MasterID != newMasterID {
		t.Fatalf("the master changed when the old master returned: %+v", g)
	}
	if code := produceAt(oldMasterID); code != errNotLeaderCode {
		t.Errorf("produce to the returned member: code %d, want %d (NOT_LEADER_OR_FOLLOWER)", code, errNotLeaderCode)
	}
	waitUntil("the returned member's high watermark to reach the new master's", 30*time.Second, func() bool {
		m, err1 := tryFetchAt(newMasterID, 0)
		s, err2 := tryFetchAt(oldMasterID, 0)
		if err1 != nil || err2 != nil {
			return false
		}
		if s.ErrorCode != 0 || m.ErrorCode != 0 || s.HighWatermark > m.HighWatermark {
			if s.HighWatermark > m.HighWatermark {
				t.Errorf("the returned member's high watermark %d is above the master's %d", s.HighWatermark, m.HighWatermark)
			}
			return false
		}
		return s.HighWatermark == top+1
	})
	back, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs[newMaster]), kgo.Rack(rackOf(oldMaster)),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	got := map[int64]string{}
	for int64(len(got)) <= top && ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := back.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) { got[r.Offset] = string(r.Value) })
	}
	for off, v := range want {
		if got[off] != v {
			t.Errorf("offset %d read back as %q from the returned member's rack, want %q", off, got[off], v)
		}
	}
	if d := metricValue(t, httpAddrs[oldMaster], series); d < float64(len(want)) {
		t.Errorf("the returned member delivered %v records, want at least %d (the consumer in its rack reads from it)", d, len(want))
	}
	t.Logf("%d records acknowledged, %d before the kill; %d produce errors", len(want), before, len(errsAfter))

	// A switch-over back to the returned member: the master it replaces
	// is demoted in place, and its door becomes the consumer-only one.
	waitFor(t, "the returned member in the controllers' in-sync set", 30*time.Second, func() bool {
		g := group()
		if g == nil {
			return false
		}
		for _, m := range g.InSync {
			if m.ID == oldMasterID {
				return true
			}
		}
		return false
	})
	var out, errOut strings.Builder
	if code := run(ctx, []string{"controller", "switch-over", "--controller-addr", strings.Join(ctrl, ";"), "--group", "broker-a",
		"--to", strconv.Itoa(int(oldMasterID))}, &out, &errOut); code != exitOK {
		t.Fatalf("switch-over to replica %d exited %d: %s %s", oldMasterID, code, out.String(), errOut.String())
	}
	waitUntil("Metadata at the returned member naming it leader, the demoted master's door listed with its rack, in sync", 60*time.Second, func() bool {
		return listed(oldMaster, oldMasterID, newMaster, newMasterID)
	})
	if code := produceAt(newMasterID); code != errNotLeaderCode {
		t.Errorf("produce to the demoted master: code %d, want %d (NOT_LEADER_OR_FOLLOWER)", code, errNotLeaderCode)
	}
	const more = 10
	for range more {
		produce()
	}
	mu.Lock()
	for off, v := range acked {
		want[off] = v
		top = max(top, off)
	}
	mu.Unlock()
	waitUntil("the demoted master's high watermark to reach its master's, both in sync", 30*time.Second, func() bool {
		m, err1 := tryFetchAt(oldMasterID, 0)
		s, err2 := tryFetchAt(newMasterID, 0)
		return err1 == nil && err2 == nil && m.ErrorCode == 0 && s.ErrorCode == 0 && s.HighWatermark == top+1 && m.HighWatermark == top+1 &&
			listed(oldMaster, oldMasterID, newMaster, newMasterID)
	})
	// The leader sends a consumer of the demoted master's rack there once
	// its view of the cluster has the demoted door in sync (a consumer
	// started before would read everything from the leader).
	waitUntil("the leader naming the demoted master the preferred read replica of its rack", 30*time.Second, func() bool {
		p, err := tryFetchRack(oldMasterID, 0, rackOf(newMaster))
		return err == nil && p.ErrorCode == 0 && p.PreferredReadReplica == int32(newMasterID)
	})
	// The counters are read before the consumer exists: a client fetches
	// from its creation on, and could have read everything before a later
	// reading.
	deliveredBefore := metricValue(t, httpAddrs[newMaster], series)
	leaderBefore := metricValue(t, httpAddrs[oldMaster], series)
	demoted, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs[oldMaster]), kgo.Rack(rackOf(newMaster)),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer demoted.Close()
	got = map[int64]string{}
	for int64(len(got)) <= top && ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := demoted.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) { got[r.Offset] = string(r.Value) })
	}
	for off, v := range want {
		if got[off] != v {
			t.Errorf("offset %d read back as %q from the demoted master's rack, want %q", off, got[off], v)
		}
	}
	if d := metricValue(t, httpAddrs[newMaster], series) - deliveredBefore; d < float64(len(want)) {
		t.Errorf("the demoted master delivered %v records (the leader %v), want at least %d (the consumer in its rack reads from it)",
			d, metricValue(t, httpAddrs[oldMaster], series)-leaderBefore, len(want))
	}
	ok = !t.Failed()
}

// errNotLeaderCode is Kafka's NOT_LEADER_OR_FOLLOWER.
const errNotLeaderCode int16 = 6
