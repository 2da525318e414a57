package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
)

// TestKafkaGoWriterReaderGroup: kafka-go's Writer with RequireAll writes
// (every codec), a Reader with a GroupID reads everything once and
// commits; a second Reader of the group after a restart of the broker
// starts after the commit.
func TestKafkaGoWriterReaderGroup(t *testing.T) {
	n := startNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "kafka-go.orders"
	write := func(addr string, from, to int) {
		for i, codec := range []compress.Compression{0, compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd} {
			w := &kafkago.Writer{Addr: kafkago.TCP(addr), Topic: topic, RequiredAcks: kafkago.RequireAll,
				Balancer: &kafkago.RoundRobin{}, Compression: codec, AllowAutoTopicCreation: true, BatchTimeout: 10 * time.Millisecond}
			var ms []kafkago.Message
			for j := from; j < to; j++ {
				if j%5 == i {
					ms = append(ms, kafkago.Message{Key: []byte(fmt.Sprint(j)), Value: fmt.Appendf(nil, "m-%d", j)})
				}
			}
			var err error
			for range 20 { // the first write may race the topic's creation
				if err = w.WriteMessages(ctx, ms...); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("write (codec %v): %v", codec, err)
			}
			w.Close()
		}
	}
	read := func(addr string, want int) map[string]int {
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{addr}, GroupID: "kg", Topic: topic,
			MaxWait: 200 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond, StartOffset: kafkago.FirstOffset})
		defer r.Close()
		got := map[string]int{}
		for len(got) < want {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				t.Fatalf("fetch after %d of %d: %v", len(got), want, err)
			}
			got[string(m.Value)]++
			if err := r.CommitMessages(ctx, m); err != nil {
				t.Fatalf("commit: %v", err)
			}
		}
		return got
	}
	write(n.addr, 0, 50)
	got := read(n.addr, 50)
	for i := range 50 {
		if got[fmt.Sprintf("m-%d", i)] != 1 {
			t.Fatalf("m-%d read %d times", i, got[fmt.Sprintf("m-%d", i)])
		}
	}
	n.stop()
	n2 := startNode(t, n.fs)
	write(n2.addr, 50, 60)
	got = read(n2.addr, 10)
	for k := range got {
		var i int
		fmt.Sscanf(k, "m-%d", &i)
		if i < 50 {
			t.Fatalf("after the commit and a restart the group read %s again", k)
		}
	}
}
