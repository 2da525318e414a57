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
	if e := n.st.MaxOffset("idem", 0); e != 3 {
		t.Fatalf("%d batches stored, want 3", e)
	}
	n.stop()
	n2 := startNode(t, n.fs)
	rc = dialRaw(t, n2.addr)
	want(rc.produce(testBatchSeq(2, pid, 0, 3)), 0, 3, "a retry across the restart")
	want(rc.produce(testBatchSeq(4, pid, 0, 5)), 0, 6, "the batch after it")
	want(rc.produce(testBatchSeq(1, pid, 1, 0)), 0, 10, "a bumped epoch")
	want(rc.produce(testBatchSeq(1, pid, 0, 9)), errInvalidProducerEpoch, 0, "the old epoch")
	if e := n2.st.MaxOffset("idem", 0); e != 5 {
		t.Fatalf("%d batches stored after the restart, want 5", e)
	}
	init.TransactionalID = kmsg.StringPtr("txn")
	if ir := rc.do(init, 4).(*kmsg.InitProducerIDResponse); ir.ErrorCode != errTransactionalIDAuthorization {
		t.Fatalf("transactional InitProducerId: %+v", ir)
	}
}
