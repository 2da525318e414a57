package kafka

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// batchEnds returns the offset after each batch of a fetch response's
// record set.
func batchEnds(t *testing.T, b []byte) []int64 {
	t.Helper()
	var ends []int64
	for len(b) > 0 {
		if len(b) < batchHeaderBytes {
			t.Fatalf("a short batch of %d bytes", len(b))
		}
		size := 12 + int(binary.BigEndian.Uint32(b[8:]))
		ends = append(ends, int64(binary.BigEndian.Uint64(b))+int64(binary.BigEndian.Uint32(b[23:]))+1)
		b = b[size:]
	}
	return ends
}

// TestFetchServesNoBatchPastHighWatermark: the dispatcher adds a batch's
// queue entries one by one, so a fetch may see the first entries of a
// batch and not its last; it must not serve that batch, whose records
// would pass the high watermark the response reports (the client's next
// fetch, at the batch's end, would then be told OFFSET_OUT_OF_RANGE and
// reset its position). The read is given the high watermark a fetch sees
// halfway through the second batch's entries.
func TestFetchServesNoBatchPastHighWatermark(t *testing.T) {
	n := startNode(t, nil)
	rc := dialRaw(t, n.addr)
	for i := range 2 {
		if got := rc.do(produceReq(-1, "hwm", testBatch(10, 0)), 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; got.ErrorCode != 0 || got.BaseOffset != int64(10*i) {
			t.Fatalf("batch %d: code %d base %d", i, got.ErrorCode, got.BaseOffset)
		}
	}
	part := n.srv.parts.get("hwm", 0)
	for _, c := range []struct {
		hwm  int64
		want []int64
	}{{15, []int64{10}}, {10, []int64{10}}, {20, []int64{10, 20}}} {
		rp := kmsg.FetchResponseTopicPartition{RecordBatches: []byte{}}
		if err := n.srv.readBatches(part, 0, c.hwm, 1<<20, &rp); err != nil {
			t.Fatal(err)
		}
		if got := batchEnds(t, rp.RecordBatches); !slices.Equal(got, c.want) {
			t.Errorf("read from 0 with the high watermark at %d: batches ending at %v, want %v", c.hwm, got, c.want)
		}
	}
	// The whole fetch path, every entry dispatched: both batches, within
	// the high watermark it reports.
	var rp kmsg.FetchResponseTopicPartition
	n.srv.fetchPartition("hwm", kmsg.FetchRequestTopicPartition{Partition: 0, FetchOffset: 0, PartitionMaxBytes: 1 << 20}, 1<<20, false, &rp)
	if got := batchEnds(t, rp.RecordBatches); rp.ErrorCode != 0 || rp.HighWatermark != 20 || !slices.Equal(got, []int64{10, 20}) {
		t.Fatalf("fetch from 0: code %d, high watermark %d, batches ending at %v; want 0, 20, [10 20]", rp.ErrorCode, rp.HighWatermark, got)
	}
}
