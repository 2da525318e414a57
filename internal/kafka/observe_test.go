package kafka

import (
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/doorstats"
	"github.com/twmb/franz-go/pkg/kgo"
)

type recordingObserver struct {
	mu        sync.Mutex
	sent      map[string]int // topic/result -> messages
	sends     int
	delivered map[string]int
}

func (o *recordingObserver) OnSend(topic string, msgs, bytes int, result string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sends++
	o.sent[topic+"/"+result] += msgs
}

func (o *recordingObserver) OnDeliver(topic string, msgs int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.delivered[topic] += msgs
}

func (o *recordingObserver) get(m map[string]int, k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return m[k]
}

// TestObserverAndTraffic: the door reports produced and fetched records to
// its Observer, and counts connections, requests and bytes in Traffic.
func TestObserverAndTraffic(t *testing.T) {
	obs := &recordingObserver{sent: map[string]int{}, delivered: map[string]int{}}
	var tr doorstats.Counters
	n := startNodeWith(t, nil, Config{Observer: obs, Traffic: &tr})
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	produceAll(t, cl, "obs", 0, 5, "v")
	if got := obs.get(obs.sent, "obs/SUCCESS"); got != 5 {
		t.Fatalf("observed %d sent records, want 5 (%v)", got, obs.sent)
	}
	consumeN(t, n.addr, "obs", 0, 2, 3)
	if got := obs.get(obs.delivered, "obs"); got < 3 {
		t.Fatalf("observed %d delivered records, want at least 3", got)
	}
	s := tr.Snapshot(doorstats.Kafka)
	if s.Accepted < 2 || s.Open < 1 || s.Requests < 4 || s.BytesIn == 0 || s.BytesOut == 0 {
		t.Fatalf("traffic %+v", s)
	}
	cl.Close()
}

func TestDeliveredRecords(t *testing.T) {
	batch := func(base int64, lastDelta int32) []byte {
		b := make([]byte, 61)
		putU64(b[0:], uint64(base))
		putU32(b[8:], uint32(len(b)-12))
		putU32(b[23:], uint32(lastDelta))
		return b
	}
	two := append(batch(10, 4), batch(15, 0)...) // offsets 10..14, 15
	for _, c := range []struct {
		from int64
		want int
	}{{10, 6}, {12, 4}, {15, 1}, {16, 0}} {
		if got := deliveredRecords(two, c.from); got != c.want {
			t.Errorf("from %d: %d, want %d", c.from, got, c.want)
		}
	}
}

func putU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

func putU32(b []byte, v uint32) {
	for i := range 4 {
		b[i] = byte(v >> (24 - 8*i))
	}
}
