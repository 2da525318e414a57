package kafka

import (
	"bufio"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// testBatchSeq is testBatch of an idempotent producer.
func testBatchSeq(n int, pid int64, epoch int16, seq int32) []byte {
	b := testBatch(n, 0)
	binary.BigEndian.PutUint64(b[43:], uint64(pid))
	binary.BigEndian.PutUint16(b[51:], uint16(epoch))
	binary.BigEndian.PutUint32(b[53:], uint32(seq))
	return recrc(b)
}

type rawConn struct {
	t    *testing.T
	c    net.Conn
	r    *bufio.Reader
	corr int32
}

func dialRaw(t *testing.T, addr string) *rawConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

// do sends req at version v and decodes the response into resp.
func (rc *rawConn) do(req kmsg.Request, v int16) kmsg.Response {
	rc.t.Helper()
	rc.corr++
	rc.c.Write(frameOf(req, v, rc.corr))
	body := readResponse(rc.t, rc.r, rc.corr)
	resp := req.ResponseKind()
	resp.SetVersion(v)
	if resp.IsFlexible() && resp.Key() != 18 {
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		rc.t.Fatal(err)
	}
	return resp
}

func (rc *rawConn) produce(batch []byte) kmsg.ProduceResponseTopicPartition {
	rc.t.Helper()
	return rc.do(produceReq(-1, "idem", batch), 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

// TestIdempotentProducer: a retried batch is answered with its original
// offset and not stored twice, also after a restart; a gap in sequences
// and an old epoch are refused; a transactional id is refused.
func TestIdempotentProducer(t *testing.T) {
	n := startNode(t, nil)
	rc := dialRaw(t, n.addr)
	init := kmsg.NewPtrInitProducerIDRequest()
	ir := rc.do(init, 4).(*kmsg.InitProducerIDResponse)
	if ir.ErrorCode != 0 || ir.ProducerID < 0 || ir.ProducerEpoch != 0 {
		t.Fatalf("InitProducerId: %+v", ir)
	}
	pid := ir.ProducerID
	want := func(got kmsg.ProduceResponseTopicPartition, code int16, base int64, what string) {
		t.Helper()
		if got.ErrorCode != code || code == 0 && got.BaseOffset != base {
			t.Fatalf("%s: code %d base %d, want code %d base %d", what, got.ErrorCode, got.BaseOffset, code, base)
		}
	}
	want(rc.produce(testBatchSeq(3, pid, 0, 0)), 0, 0, "first batch")
	want(rc.produce(testBatchSeq(3, pid, 0, 0)), 0, 0, "its retry")
	want(rc.produce(testBatchSeq(2, pid, 0, 3)), 0, 3, "next batch")
	want(rc.produce(testBatchSeq(1, pid, 0, 9)), errOutOfOrderSequence, 0, "a gap")
	want(rc.produce(testBatchSeq(1, 0, 0, 0)), 0, 5, "another producer")
	if e := n.st.MaxOffset("idem", 0); e != 6 { // 3 + 2 + 1 records, one entry each
		t.Fatalf("%d entries stored, want 6", e)
	}
	n.stop()
	n2 := startNode(t, n.fs)
	rc = dialRaw(t, n2.addr)
	want(rc.produce(testBatchSeq(2, pid, 0, 3)), 0, 3, "a retry across the restart")
	want(rc.produce(testBatchSeq(4, pid, 0, 5)), 0, 6, "the batch after it")
	want(rc.produce(testBatchSeq(1, pid, 1, 0)), 0, 10, "a bumped epoch")
	want(rc.produce(testBatchSeq(1, pid, 0, 9)), errInvalidProducerEpoch, 0, "the old epoch")
	if e := n2.st.MaxOffset("idem", 0); e != 11 { // and 4 + 1
		t.Fatalf("%d entries stored after the restart, want 11", e)
	}
	init.TransactionalID, init.TransactionTimeoutMillis = kmsg.StringPtr("txn"), 60000
	if ir := rc.do(init, 4).(*kmsg.InitProducerIDResponse); ir.ErrorCode != 0 || ir.ProducerEpoch != 0 || ir.ProducerID <= 0 {
		t.Fatalf("transactional InitProducerId: %+v", ir)
	}
}

// TestProducerStateExpires: a producer idle for longer than the expiration
// is forgotten (its retry is stored again, as Kafka does once the state
// expired), also when the state is rebuilt from the log after a restart;
// and the producers a partition remembers stay within the bound, the
// longest idle forgotten first.
func TestProducerStateExpires(t *testing.T) {
	n := startNode(t, nil)
	clock := time.Now()
	n.srv.parts.now = func() time.Time { return clock }
	exp := time.Duration(n.srv.parts.lim.expireMs) * time.Millisecond
	rc := dialRaw(t, n.addr)
	if got := rc.produce(testBatchSeq(1, 7, 0, 0)); got.ErrorCode != 0 || got.BaseOffset != 0 {
		t.Fatalf("first: %+v", got)
	}
	clock = clock.Add(exp - time.Second)
	if got := rc.produce(testBatchSeq(1, 7, 0, 0)); got.BaseOffset != 0 {
		t.Fatalf("a retry before the expiration stored at %d, want the original 0", got.BaseOffset)
	}
	clock = clock.Add(2 * time.Second)
	if got := rc.produce(testBatchSeq(1, 7, 0, 0)); got.ErrorCode != 0 || got.BaseOffset != 1 {
		t.Fatalf("after the expiration: %+v, want stored anew at 1", got)
	}
	// After a restart the window comes from the log, aged by store time.
	n.stop()
	n2 := startNode(t, n.fs)
	n2.srv.parts.now = func() time.Time { return time.Now().Add(exp + time.Minute) }
	rc = dialRaw(t, n2.addr)
	if got := rc.produce(testBatchSeq(1, 7, 0, 0)); got.ErrorCode != 0 || got.BaseOffset != 2 {
		t.Fatalf("after a restart past the expiration: %+v, want stored anew at 2", got)
	}

	// The bound: 8 producers at most, the longest idle go first.
	n2.srv.parts.lim.max = 8
	clock = time.Now()
	n2.srv.parts.now = func() time.Time { return clock }
	for pid := int64(100); pid < 120; pid++ {
		clock = clock.Add(time.Millisecond)
		if got := rc.produce(testBatchSeq(1, pid, 0, 0)); got.ErrorCode != 0 {
			t.Fatalf("producer %d: %+v", pid, got)
		}
	}
	p := n2.srv.parts.get("idem", 0)
	p.appendMu.Lock()
	kept, newest := len(p.producers), p.producers[119] != nil
	p.appendMu.Unlock()
	if kept > 8 || !newest {
		t.Fatalf("%d producers kept (newest kept: %v), want at most 8 with the newest", kept, newest)
	}
	before := n2.st.MaxOffset("idem", 0)
	if got := rc.produce(testBatchSeq(1, 119, 0, 0)); got.ErrorCode != 0 || n2.st.MaxOffset("idem", 0) != before {
		t.Fatalf("the newest producer's retry was stored again: %+v", got)
	}
}

// TestPIDAllocatorUniqueAcrossBrokers: brokers that start in the same
// millisecond hand out disjoint producer ids, also past 4,096 ids, and a
// broker that restarts later hands out ids above the ones it handed out.
func TestPIDAllocatorUniqueAcrossBrokers(t *testing.T) {
	start := time.UnixMilli(1_790_000_000_000)
	seen := map[int64]int32{}
	for _, node := range []int32{0, 1, 7, 255} {
		a := newPIDAllocator(start, node)
		for i := 0; i < 10_000; i++ {
			id := a.next()
			if id <= 0 {
				t.Fatalf("node %d: id %d is not positive", node, id)
			}
			if other, dup := seen[id]; dup {
				t.Fatalf("id %d handed out by node %d and node %d", id, other, node)
			}
			seen[id] = node
		}
	}
	a := newPIDAllocator(start, 3)
	var last int64
	for i := 0; i < 8192; i++ { // two milliseconds' worth
		last = a.next()
	}
	b := newPIDAllocator(start.Add(3*time.Millisecond), 3) // restarted later
	if first := b.next(); first <= last {
		t.Fatalf("after a restart the first id %d is not above the last one %d", first, last)
	}
}
