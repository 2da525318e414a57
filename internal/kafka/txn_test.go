package kafka

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/translate"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// txnRaw is a transactional producer speaking kmsg requests.
type txnRaw struct {
	rc    *rawConn
	id    string
	pid   int64
	epoch int16
	seq   map[int32]int32
}

func newTxnRaw(t *testing.T, addr, id string) *txnRaw {
	return &txnRaw{rc: dialRaw(t, addr), id: id, seq: map[int32]int32{}}
}

func (x *txnRaw) init(timeoutMs int32) *kmsg.InitProducerIDResponse {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID, req.TransactionTimeoutMillis = kmsg.StringPtr(x.id), timeoutMs
	resp := x.rc.do(req, 4).(*kmsg.InitProducerIDResponse)
	if resp.ErrorCode == 0 {
		x.pid, x.epoch = resp.ProducerID, resp.ProducerEpoch
		x.seq = map[int32]int32{}
	}
	return resp
}

// addParts adds partitions of topic; it returns each partition's code.
func (x *txnRaw) addParts(topic string, parts ...int32) map[int32]int16 {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = x.id, x.pid, x.epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = topic, parts
	req.Topics = append(req.Topics, rt)
	resp := x.rc.do(req, 3).(*kmsg.AddPartitionsToTxnResponse)
	codes := map[int32]int16{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			codes[p.Partition] = p.ErrorCode
		}
	}
	return codes
}

// produce sends n records to topic/p as one transactional batch.
func (x *txnRaw) produce(topic string, p int32, n int) kmsg.ProduceResponseTopicPartition {
	b := testBatchSeq(n, x.pid, x.epoch, x.seq[p])
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|attrTransactional)
	recrc(b)
	req := produceReq(-1, topic, b)
	req.Topics[0].Partitions[0].Partition = p
	req.TransactionID = kmsg.StringPtr(x.id)
	rp := x.rc.do(req, 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	if rp.ErrorCode == 0 {
		x.seq[p] += int32(n)
	}
	return rp
}

func (x *txnRaw) end(commit bool, version int16) int16 {
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = x.id, x.pid, x.epoch, commit
	return x.rc.do(req, version).(*kmsg.EndTxnResponse).ErrorCode
}

func (x *txnRaw) addOffsets(group string) int16 {
	req := kmsg.NewPtrAddOffsetsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = x.id, x.pid, x.epoch, group
	return x.rc.do(req, 3).(*kmsg.AddOffsetsToTxnResponse).ErrorCode
}

func (x *txnRaw) commitOffset(group, topic string, p int32, off int64) int16 {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = x.id, x.pid, x.epoch, group
	req.Generation = -1
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = p, off
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return x.rc.do(req, 3).(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
}

// fetchTxn fetches topic/p from off with the isolation level.
func fetchTxn(rc *rawConn, topic string, p int32, off int64, committed bool) kmsg.FetchResponseTopicPartition {
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes, req.MinBytes, req.MaxWaitMillis = 1<<20, 0, 0
	if committed {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return rc.do(req, 11).(*kmsg.FetchResponse).Topics[0].Partitions[0]
}

// listLatest answers ListOffsets latest of topic/p with the isolation level.
func listLatest(rc *rawConn, topic string, p int32, committed bool) int64 {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	if committed {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = p, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return rc.do(req, 5).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].Offset
}

// batchesIn counts the batches of a fetched record set and the control
// ones among them.
func batchesIn(t *testing.T, b []byte) (batches, control int) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("%d bytes left: not a batch", len(b))
		}
		n := int(binary.BigEndian.Uint32(b[8:])) + 12
		if binary.BigEndian.Uint16(b[21:])&attrControl != 0 {
			control++
		}
		batches++
		b = b[n:]
	}
	return batches, control
}

// TestTxnAPIs walks one transactional id through the APIs: refusals
// (timeout, empty id, a partition not added, an unknown topic), the LSO
// while the transaction is open (Fetch read_committed serves nothing
// past it and ListOffsets answers it), the commit marker, and EndTxn's
// retry and mismatch answers.
func TestTxnAPIs(t *testing.T) {
	n := startNode(t, nil)
	if _, _, err := n.srv.autoCreate("apis"); err != nil {
		t.Fatal(err)
	}
	x := newTxnRaw(t, n.addr, "apis-1")
	if r := x.init(0); r.ErrorCode != errInvalidTxnTimeout {
		t.Fatalf("timeout 0: %+v", r)
	}
	if r := x.init(int32((16 * time.Minute).Milliseconds())); r.ErrorCode != errInvalidTxnTimeout {
		t.Fatalf("timeout above the maximum: %+v", r)
	}
	empty := newTxnRaw(t, n.addr, "")
	if r := empty.init(1000); r.ErrorCode != errInvalidRequest {
		t.Fatalf("empty transactional id: %+v", r)
	}
	if r := x.init(60000); r.ErrorCode != 0 || r.ProducerEpoch != 0 {
		t.Fatalf("init: %+v", r)
	}
	// A plain produce before the transaction: LSO = HWM = 2.
	if rp := x.rc.do(produceReq(-1, "apis", testBatch(2, 0)), 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; rp.ErrorCode != 0 {
		t.Fatalf("plain produce: %+v", rp)
	}
	if rp := x.produce("apis", 0, 1); rp.ErrorCode != errInvalidTxnState {
		t.Fatalf("produce to a partition not added: %+v", rp)
	}
	if codes := x.addParts("nope", 0); codes[0] != errUnknownTopicOrPartition {
		t.Fatalf("unknown topic: %v", codes)
	}
	if codes := x.addParts("apis", 0); codes[0] != 0 {
		t.Fatalf("add partition: %v", codes)
	}
	if rp := x.produce("apis", 0, 3); rp.ErrorCode != 0 || rp.BaseOffset != 2 {
		t.Fatalf("transactional produce: %+v", rp)
	}
	rc := dialRaw(t, n.addr)
	f := fetchTxn(rc, "apis", 0, 0, true)
	if f.ErrorCode != 0 || f.HighWatermark != 5 || f.LastStableOffset != 2 {
		t.Fatalf("read_committed fetch while open: code %d hwm %d lso %d", f.ErrorCode, f.HighWatermark, f.LastStableOffset)
	}
	if b, _ := batchesIn(t, f.RecordBatches); b != 1 {
		t.Fatalf("read_committed fetch served %d batches, want only the one before the LSO", b)
	}
	if f := fetchTxn(rc, "apis", 0, 2, true); len(f.RecordBatches) != 0 {
		t.Fatalf("read_committed fetch at the LSO served %d bytes", len(f.RecordBatches))
	}
	if f := fetchTxn(rc, "apis", 0, 0, false); f.LastStableOffset != 2 {
		t.Fatalf("read_uncommitted fetch: lso %d", f.LastStableOffset)
	} else if b, _ := batchesIn(t, f.RecordBatches); b != 2 {
		t.Fatalf("read_uncommitted fetch served %d batches, want 2", b)
	}
	if got := listLatest(rc, "apis", 0, true); got != 2 {
		t.Fatalf("ListOffsets latest read_committed = %d, want the LSO 2", got)
	}
	if got := listLatest(rc, "apis", 0, false); got != 5 {
		t.Fatalf("ListOffsets latest read_uncommitted = %d, want 5", got)
	}
	if code := x.end(true, 3); code != 0 {
		t.Fatalf("commit: %d", code)
	}
	f = fetchTxn(rc, "apis", 0, 0, true)
	if f.HighWatermark != 6 || f.LastStableOffset != 6 || len(f.AbortedTransactions) != 0 {
		t.Fatalf("after the commit: hwm %d lso %d aborted %v", f.HighWatermark, f.LastStableOffset, f.AbortedTransactions)
	}
	if b, c := batchesIn(t, f.RecordBatches); b != 3 || c != 1 {
		t.Fatalf("after the commit: %d batches, %d control, want 3 and the marker", b, c)
	}
	if code := x.end(true, 3); code != 0 {
		t.Fatalf("a retried commit: %d", code)
	}
	if code := x.end(false, 3); code != errInvalidTxnState {
		t.Fatalf("abort after a commit: %d", code)
	}
	wrong := *x
	wrong.pid++
	if code := wrong.end(true, 3); code != errInvalidProducerIDMapping {
		t.Fatalf("another producer id: %d", code)
	}
	resp := rc.do(kmsg.NewPtrApiVersionsRequest(), 3).(*kmsg.ApiVersionsResponse)
	adv := map[int16]bool{}
	for _, k := range resp.ApiKeys {
		adv[k.ApiKey] = true
	}
	for _, k := range []int16{24, 25, 26, 28} {
		if !adv[k] {
			t.Errorf("key %d not advertised", k)
		}
	}
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKey = 1, "apis-1"
	if r := rc.do(fc, 3).(*kmsg.FindCoordinatorResponse); r.ErrorCode != 0 || r.NodeID != 0 {
		t.Fatalf("FindCoordinator of a transactional id: %+v", r)
	}
}

// TestTxnFencing: a second producer with the same transactional id bumps
// the epoch and aborts the first one's open transaction; the first is
// fenced (Produce INVALID_PRODUCER_EPOCH, the coordinator requests
// PRODUCER_FENCED, INVALID_PRODUCER_EPOCH below v2), and a read_committed
// consumer sees only the second one's records.
func TestTxnFencing(t *testing.T) {
	n := startNode(t, nil)
	if _, _, err := n.srv.autoCreate("fence"); err != nil {
		t.Fatal(err)
	}
	a := openTxn(t, n.addr, "fence-1", "fence")
	b := newTxnRaw(t, n.addr, "fence-1")
	// As in Kafka: one bump for the abort of a's transaction, one for b.
	if r := b.init(60000); r.ErrorCode != 0 || r.ProducerID != a.pid || r.ProducerEpoch != a.epoch+2 {
		t.Fatalf("second init: %+v (first: pid %d epoch %d)", r, a.pid, a.epoch)
	}
	if rp := a.produce("fence", 0, 1); rp.ErrorCode != errInvalidProducerEpoch {
		t.Fatalf("fenced produce: %+v", rp)
	}
	if code := a.end(true, 3); code != errProducerFenced {
		t.Fatalf("fenced EndTxn v3: %d", code)
	}
	if code := a.end(true, 1); code != errInvalidProducerEpoch {
		t.Fatalf("fenced EndTxn v1: %d", code)
	}
	if codes := a.addParts("fence", 1); codes[1] != errProducerFenced {
		t.Fatalf("fenced AddPartitionsToTxn: %v", codes)
	}
	if code := a.addOffsets("g"); code != errProducerFenced {
		t.Fatalf("fenced AddOffsetsToTxn: %d", code)
	}
	b.addParts("fence", 0)
	if rp := b.produce("fence", 0, 1); rp.ErrorCode != 0 {
		t.Fatalf("new producer: %+v", rp)
	}
	if code := b.end(true, 3); code != 0 {
		t.Fatalf("new producer's commit: %d", code)
	}
	rc := dialRaw(t, n.addr)
	f := fetchTxn(rc, "fence", 0, 0, true)
	// a's 2 records, its abort marker, b's record, b's commit marker.
	if f.HighWatermark != 5 || f.LastStableOffset != 5 {
		t.Fatalf("hwm %d lso %d, want 5", f.HighWatermark, f.LastStableOffset)
	}
	if len(f.AbortedTransactions) != 1 || f.AbortedTransactions[0].ProducerID != a.pid || f.AbortedTransactions[0].FirstOffset != 0 {
		t.Fatalf("aborted transactions %+v, want the first producer's from 0", f.AbortedTransactions)
	}
}

// waitTxnState waits until the entry of id is in state want.
func waitTxnState(t *testing.T, s *Server, id string, want txnState) *txnEntry {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.txn.mu.Lock()
		var e *txnEntry
		if sl := s.txn.byID[id]; sl != nil {
			e = sl.e
		}
		s.txn.mu.Unlock()
		if e != nil && e.State == want {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("transactional id %s: %+v, want state %v", id, e, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTxnTimeoutAborts: a transaction open past its timeout is aborted by
// the broker with the epoch bumped: its producer is fenced and its
// records are aborted for read_committed consumers.
func TestTxnTimeoutAborts(t *testing.T) {
	n := startNode(t, nil)
	if _, _, err := n.srv.autoCreate("tmo"); err != nil {
		t.Fatal(err)
	}
	x := newTxnRaw(t, n.addr, "tmo-1")
	if r := x.init(300); r.ErrorCode != 0 {
		t.Fatal(r)
	}
	x.addParts("tmo", 0)
	if rp := x.produce("tmo", 0, 2); rp.ErrorCode != 0 {
		t.Fatalf("%+v", rp)
	}
	e := waitTxnState(t, n.srv, "tmo-1", txnCompleteAbort)
	if e.Epoch != x.epoch+1 {
		t.Fatalf("epoch %d after the timeout, want %d", e.Epoch, x.epoch+1)
	}
	if code := x.end(true, 3); code != errProducerFenced {
		t.Fatalf("EndTxn after the timeout: %d", code)
	}
	if rp := x.produce("tmo", 0, 1); rp.ErrorCode != errInvalidProducerEpoch {
		t.Fatalf("produce after the timeout: %+v", rp)
	}
	rc := dialRaw(t, n.addr)
	f := fetchTxn(rc, "tmo", 0, 0, true)
	if f.LastStableOffset != 3 || len(f.AbortedTransactions) != 1 {
		t.Fatalf("lso %d aborted %+v", f.LastStableOffset, f.AbortedTransactions)
	}
	// As Kafka (KIP-360): the producer whose transaction timed out may
	// recover by naming its producer id and its fenced epoch; an older
	// epoch may not.
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID, req.TransactionTimeoutMillis = kmsg.StringPtr("tmo-1"), 60000
	req.ProducerID, req.ProducerEpoch = x.pid, x.epoch-1
	if r := x.rc.do(req, 4).(*kmsg.InitProducerIDResponse); r.ErrorCode != errProducerFenced {
		t.Fatalf("InitProducerId with an epoch older than the fenced one: %+v", r)
	}
	req.ProducerEpoch = x.epoch
	if r := x.rc.do(req, 4).(*kmsg.InitProducerIDResponse); r.ErrorCode != 0 || r.ProducerID != x.pid || r.ProducerEpoch != x.epoch+2 {
		t.Fatalf("InitProducerId naming the epoch the timeout fenced: %+v", r)
	}
	if r := x.rc.do(req, 4).(*kmsg.InitProducerIDResponse); r.ErrorCode != errProducerFenced {
		t.Fatalf("the fenced epoch named again after the recovery: %+v", r)
	}
}

// offsetFetch asks OffsetFetch v7 for group's offset of topic/p.
func offsetFetchRaw(rc *rawConn, group, topic string, p int32, stable bool) kmsg.OffsetFetchResponseTopicPartition {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group, req.RequireStable = group, stable
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{p}
	req.Topics = append(req.Topics, rt)
	return rc.do(req, 7).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0]
}

// TestTxnOffsetCommit: offsets given to a transaction are visible to
// OffsetFetch only once it commits (before, RequireStable answers
// UNSTABLE_OFFSET_COMMIT), and an abort discards them.
func TestTxnOffsetCommit(t *testing.T) {
	n := startNode(t, nil)
	if _, _, err := n.srv.autoCreate("offs"); err != nil {
		t.Fatal(err)
	}
	x := newTxnRaw(t, n.addr, "offs-1")
	if r := x.init(60000); r.ErrorCode != 0 {
		t.Fatal(r)
	}
	if code := x.commitOffset("g", "offs", 0, 5); code != errInvalidTxnState {
		t.Fatalf("TxnOffsetCommit before AddOffsetsToTxn: %d", code)
	}
	if code := x.addOffsets("g"); code != 0 {
		t.Fatal(code)
	}
	if code := x.commitOffset("g", "offs", 0, 5); code != 0 {
		t.Fatal(code)
	}
	rc := dialRaw(t, n.addr)
	if o := offsetFetchRaw(rc, "g", "offs", 0, false); o.Offset != -1 {
		t.Fatalf("offset visible before the commit: %+v", o)
	}
	if o := offsetFetchRaw(rc, "g", "offs", 0, true); o.ErrorCode != errUnstableOffsetCommit {
		t.Fatalf("RequireStable while pending: %+v", o)
	}
	if code := x.end(false, 3); code != 0 {
		t.Fatal(code)
	}
	if o := offsetFetchRaw(rc, "g", "offs", 0, true); o.ErrorCode != 0 || o.Offset != -1 {
		t.Fatalf("offset after the abort: %+v", o)
	}
	x.addOffsets("g")
	if code := x.commitOffset("g", "offs", 0, 7); code != 0 {
		t.Fatal(code)
	}
	if code := x.end(true, 3); code != 0 {
		t.Fatal(code)
	}
	if o := offsetFetchRaw(rc, "g", "offs", 0, true); o.ErrorCode != 0 || o.Offset != 7 {
		t.Fatalf("offset after the commit: %+v", o)
	}
}

// waitTxnLoaded waits until the server replayed the coordinator's state.
func waitTxnLoaded(t *testing.T, s *Server) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !s.txnLoaded.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the transaction coordinator did not load")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTxnRecoveryAfterPowerLoss: the coordinator's state survives a power
// loss (vfs.MemFS forgets what no fdatasync covered). A committed
// transaction stays committed; one whose commit was logged (PrepareCommit)
// but whose markers were not written is completed at start; one left open
// is still open (its LSO holds) and is aborted at its timeout; and after
// a clean restart (from the snapshot) the ids keep their producer ids and
// epochs.
func TestTxnRecoveryAfterPowerLoss(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{DataDir: "/data", FS: fs}
	n := startNodeWith(t, fs, cfg)
	if _, _, err := n.srv.autoCreate("rec"); err != nil {
		t.Fatal(err)
	}
	a := newTxnRaw(t, n.addr, "rec-a")
	a.init(60000)
	a.addParts("rec", 0)
	a.produce("rec", 0, 2)
	if code := a.end(true, 3); code != 0 {
		t.Fatal(code)
	}
	b := newTxnRaw(t, n.addr, "rec-b")
	b.init(4000)
	b.addParts("rec", 0)
	if rp := b.produce("rec", 0, 3); rp.ErrorCode != 0 || rp.BaseOffset != 3 {
		t.Fatalf("%+v", rp)
	}
	c := newTxnRaw(t, n.addr, "rec-c")
	c.init(60000)
	c.addParts("rec", 1)
	if rp := c.produce("rec", 1, 2); rp.ErrorCode != 0 {
		t.Fatalf("%+v", rp)
	}
	// The commit of c logged, its markers not written yet: a crash there.
	sl := n.srv.txn.slot("rec-c")
	sl.mu.Lock()
	prep := n.srv.txn.entry(sl).clone()
	prep.State = txnPrepareCommit
	code := n.srv.logTxnWait(prep, nil)
	sl.mu.Unlock()
	if code != 0 {
		t.Fatal(code)
	}
	survived := fs.CrashClone()
	n.stop()

	n2 := startNodeWith(t, survived, Config{DataDir: "/data", FS: survived})
	waitTxnLoaded(t, n2.srv)
	if e := n2.srv.txn.entry(n2.srv.txn.slot("rec-b")); e == nil || e.State != txnOngoing {
		t.Fatalf("the open transaction after the power loss: %+v", e)
	}
	rc := dialRaw(t, n2.addr)
	if f := fetchTxn(rc, "rec", 0, 0, true); f.HighWatermark != 6 || f.LastStableOffset != 3 {
		t.Fatalf("partition 0 after the power loss: hwm %d lso %d, want 6 and 3", f.HighWatermark, f.LastStableOffset)
	}
	waitTxnState(t, n2.srv, "rec-c", txnCompleteCommit)
	if f := fetchTxn(rc, "rec", 1, 0, true); f.HighWatermark != 3 || f.LastStableOffset != 3 {
		t.Fatalf("partition 1 after completing the commit: hwm %d lso %d, want 3 (2 records, the marker)", f.HighWatermark, f.LastStableOffset)
	} else if _, ctl := batchesIn(t, f.RecordBatches); ctl != 1 {
		t.Fatalf("partition 1: %d markers, want 1", ctl)
	}
	if got := consumeValues(t, n2.addr, "rec", 1, true, 2); len(got) != 2 {
		t.Fatalf("partition 1 read_committed: %q", got)
	}
	eb := waitTxnState(t, n2.srv, "rec-b", txnCompleteAbort)
	if eb.Epoch != b.epoch+1 {
		t.Fatalf("epoch %d after the timeout abort, want %d", eb.Epoch, b.epoch+1)
	}
	if got := consumeValues(t, n2.addr, "rec", 0, true, 2); len(got) != 2 {
		t.Fatalf("partition 0 read_committed: %q, want a's 2 records only", got)
	}
	n2.stop()
	if _, err := survived.Stat("/data/config/kafkaTransactions.json"); err != nil {
		t.Fatalf("no snapshot after a clean stop: %v", err)
	}

	n3 := startNodeWith(t, survived, Config{DataDir: "/data", FS: survived})
	a3 := newTxnRaw(t, n3.addr, "rec-a")
	if r := a3.init(60000); r.ErrorCode != 0 || r.ProducerID != a.pid || r.ProducerEpoch != a.epoch+1 {
		t.Fatalf("init after the restart: %+v, want pid %d epoch %d", r, a.pid, a.epoch+1)
	}
	rc3 := dialRaw(t, n3.addr)
	if f := fetchTxn(rc3, "rec", 0, 0, true); f.LastStableOffset != f.HighWatermark || len(f.AbortedTransactions) != 1 {
		t.Fatalf("partition 0 after the restart: hwm %d lso %d aborted %+v", f.HighWatermark, f.LastStableOffset, f.AbortedTransactions)
	}
}

// TestTxnEpochExhausted: at the last epoch InitProducerId gives the id a
// new producer id, and the open transaction of the old one is aborted
// under the old id (its marker and aborted entry name it).
func TestTxnEpochExhausted(t *testing.T) {
	n := startNode(t, nil)
	if _, _, err := n.srv.autoCreate("exh"); err != nil {
		t.Fatal(err)
	}
	x := newTxnRaw(t, n.addr, "exh-1")
	x.init(60000)
	sl := n.srv.txn.slot("exh-1")
	sl.mu.Lock()
	last := n.srv.txn.entry(sl).clone()
	last.Epoch = 32766
	code := n.srv.logTxnWait(last, nil)
	sl.mu.Unlock()
	if code != 0 {
		t.Fatal(code)
	}
	x.epoch = 32766
	x.addParts("exh", 0)
	if rp := x.produce("exh", 0, 2); rp.ErrorCode != 0 {
		t.Fatalf("%+v", rp)
	}
	y := newTxnRaw(t, n.addr, "exh-1")
	if r := y.init(60000); r.ErrorCode != 0 || r.ProducerID == x.pid || r.ProducerEpoch != 0 {
		t.Fatalf("init at the last epoch: %+v (old pid %d)", r, x.pid)
	}
	f := fetchTxn(dialRaw(t, n.addr), "exh", 0, 0, true)
	if f.LastStableOffset != 3 || len(f.AbortedTransactions) != 1 || f.AbortedTransactions[0].ProducerID != x.pid {
		t.Fatalf("lso %d aborted %+v, want the old producer id %d aborted", f.LastStableOffset, f.AbortedTransactions, x.pid)
	}
}

// TestTxnSnapshotPastLogEnd: a snapshot whose point is past the log's
// end (the log was cut since) is not used: the state comes from the log.
func TestTxnSnapshotPastLogEnd(t *testing.T) {
	fs := vfs.NewMem()
	n := startNodeWith(t, fs, Config{DataDir: "/data", FS: fs})
	x := newTxnRaw(t, n.addr, "snap-a")
	if r := x.init(60000); r.ErrorCode != 0 {
		t.Fatal(r)
	}
	n.stop()
	bogus := []byte(`{"keelLogOffset":1099511627776,"transactions":[],"aborted":[]}`)
	if err := vfs.WriteFileDurable(fs, "/data/config/kafkaTransactions.json", bogus, 0o644); err != nil {
		t.Fatal(err)
	}
	n2 := startNodeWith(t, fs, Config{DataDir: "/data", FS: fs})
	waitTxnLoaded(t, n2.srv)
	if e := n2.srv.txn.entry(n2.srv.txn.slot("snap-a")); e == nil || e.PID != x.pid {
		t.Fatalf("state after a snapshot past the log's end: %+v, want producer id %d", e, x.pid)
	}
}

// TestTxnMarkerNotConverted: a RocketMQ pull (or AMQP delivery) meeting a
// marker converts it into no message, without an error, and the index
// takes no key of it.
func TestTxnMarkerNotConverted(t *testing.T) {
	n := startNode(t, nil)
	if _, _, err := n.srv.autoCreate("conv"); err != nil {
		t.Fatal(err)
	}
	x := newTxnRaw(t, n.addr, "conv-1")
	x.init(60000)
	x.addParts("conv", 0)
	x.produce("conv", 0, 2)
	if code := x.end(true, 3); code != 0 {
		t.Fatal(code)
	}
	r, err := n.st.GetMessage("conv", 0, 2, 1, 1, nil) // the marker's entry
	if err != nil || r.Status != store.Found || len(r.Records) != 1 {
		t.Fatalf("marker entry: %v %v", err, r.Status)
	}
	defer r.Release()
	b, err := kafkaView(r.Records[0], queueKey{"conv", 0})
	if err != nil || !b.control {
		t.Fatalf("entry 2 is not a marker: %+v %v", b, err)
	}
	out, msgs, err := translate.AppendRocketMQEntries(nil, r.Records[0], "conv", 0, 2, 3, translate.Broker{Host: netip.MustParseAddrPort("127.0.0.1:10911")}, translate.DefaultLimit)
	if err != nil || msgs != 0 || len(out) != 0 {
		t.Fatalf("marker converted for RocketMQ: %d messages, %d bytes, %v", msgs, len(out), err)
	}
	keys := 0
	if err := translate.IndexKeys(r.Records[0], translate.DefaultLimit, func([]byte) { keys++ }); err != nil || keys != 0 {
		t.Fatalf("index keys of a marker: %d, %v", keys, err)
	}
}

// TestTxnIDExpires: a transactional id idle (no open transaction) for
// longer than the expiration is forgotten: the producer coming back gets
// a new producer id; an id with an open transaction is kept.
func TestTxnIDExpires(t *testing.T) {
	n := startNodeWith(t, nil, Config{TransactionalIDExpiration: time.Hour})
	if _, _, err := n.srv.autoCreate("exp"); err != nil {
		t.Fatal(err)
	}
	idle := newTxnRaw(t, n.addr, "exp-idle")
	idle.init(60000)
	open := newTxnRaw(t, n.addr, "exp-open")
	open.init(60000)
	open.addParts("exp", 0)
	c := n.srv.txn
	c.mu.Lock()
	n.srv.expireTxnIDsLocked(time.Now().Add(30 * time.Minute).UnixMilli())
	kept := c.byID["exp-idle"] != nil
	n.srv.expireTxnIDsLocked(time.Now().Add(2 * time.Hour).UnixMilli())
	gone, openKept := c.byID["exp-idle"] == nil, c.byID["exp-open"] != nil
	c.mu.Unlock()
	if !kept || !gone || !openKept {
		t.Fatalf("kept before the expiration %v, forgotten after it %v, open transaction kept %v", kept, gone, openKept)
	}
	again := newTxnRaw(t, n.addr, "exp-idle")
	if r := again.init(60000); r.ErrorCode != 0 || r.ProducerID == idle.pid || r.ProducerEpoch != 0 {
		t.Fatalf("init of an expired id: %+v (old producer id %d)", r, idle.pid)
	}
}

// TestTxnUnknownIDLeavesNothing: coordinator requests naming an id no
// InitProducerId made known are refused (INVALID_PRODUCER_ID_MAPPING)
// and keep no state for it.
func TestTxnUnknownIDLeavesNothing(t *testing.T) {
	n := startNode(t, nil)
	if _, _, err := n.srv.autoCreate("unk"); err != nil {
		t.Fatal(err)
	}
	x := newTxnRaw(t, n.addr, "never-initialized")
	x.pid, x.epoch = 12345, 0
	if c := x.addParts("unk", 0); c[0] != errInvalidProducerIDMapping {
		t.Fatalf("AddPartitionsToTxn: %v", c)
	}
	if c := x.addOffsets("g"); c != errInvalidProducerIDMapping {
		t.Fatalf("AddOffsetsToTxn: %d", c)
	}
	if c := x.commitOffset("g", "unk", 0, 1); c != errInvalidProducerIDMapping {
		t.Fatalf("TxnOffsetCommit: %d", c)
	}
	if c := x.end(true, 3); c != errInvalidProducerIDMapping {
		t.Fatalf("EndTxn: %d", c)
	}
	n.srv.txn.mu.Lock()
	ids := len(n.srv.txn.byID)
	n.srv.txn.mu.Unlock()
	if ids != 0 {
		t.Fatalf("%d transactional ids kept after requests naming an unknown one", ids)
	}
}

// TestTxnUnconfirmedIsRetriable: when the coordinator's record is not
// confirmed in time (a SYNC_MASTER without its slave), the request is
// answered COORDINATOR_NOT_AVAILABLE, which clients retry, not a storage
// error.
func TestTxnUnconfirmedIsRetriable(t *testing.T) {
	n := startNodeStore(t, nil, Config{}, func(c *store.Config) {
		c.ExternalReplication = true
		c.ReplicationTimeout = 200 * time.Millisecond
	})
	x := newTxnRaw(t, n.addr, "unconf")
	if r := x.init(60000); r.ErrorCode != errCoordinatorNotAvailable {
		t.Fatalf("InitProducerId without confirmation: %+v", r)
	}
}

// openTxn starts transactional id id at addr (a 60 s timeout) and
// produces two records to topic's partition 0 in its transaction, left
// open.
func openTxn(t *testing.T, addr, id, topic string) *txnRaw {
	t.Helper()
	x := newTxnRaw(t, addr, id)
	if r := x.init(60000); r.ErrorCode != 0 {
		t.Fatal(r)
	}
	x.addParts(topic, 0)
	if rp := x.produce(topic, 0, 2); rp.ErrorCode != 0 {
		t.Fatalf("%+v", rp)
	}
	return x
}
