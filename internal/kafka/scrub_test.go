package kafka

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestScrubberAcceptsProducedBatches: batches of several records produced
// in every codec (one ConsumeQueue entry per record, all locating the
// batch) are a sound store for the background scrubber and for Check.
func TestScrubberAcceptsProducedBatches(t *testing.T) {
	n := startNodeStore(t, nil, Config{}, func(c *store.Config) {
		c.ScrubBytesPerSecond = 64 << 20
		c.ScrubPassInterval = -1 // passes follow each other
	})
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(),
		kgo.Lz4Compression(), kgo.ZstdCompression()}
	for i, codec := range codecs {
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.ProducerBatchCompression(codec),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprint("c", i, strings.Repeat(" a line that compresses", 10))
		produceAll(t, cl, "scrubbed", 0, 3, line) // three lines, as kcat -P sends them
		produceAll(t, cl, "scrubbed", 1, 50, line)
		cl.Close()
	}
	if got := storedCodecs(t, n, "scrubbed", 0); len(got) != len(codecs) {
		t.Fatalf("codecs of the stored batches %v, want %d", got, len(codecs))
	}
	start := n.st.ScrubStatus().Passes
	deadline := time.Now().Add(20 * time.Second)
	for n.st.ScrubStatus().Passes < start+2 {
		if time.Now().After(deadline) {
			t.Fatalf("no two scrub passes after the produces: %+v", n.st.ScrubStatus())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := n.st.ScrubStatus(); st.Problems != 0 {
		t.Fatalf("the scrubber reported %d problems in a sound store: %v", st.Problems, st.Recent)
	}
	cfg := store.DefaultConfig("/data")
	cfg.FS, cfg.CommitLogSegmentBytes, cfg.ConsumeQueueSegmentEntries = n.fs, 64<<20, 10000
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 100, 400
	n.stop()
	rep, err := store.Check(cfg)
	if err != nil || !rep.OK() {
		t.Fatalf("check: %v, problems %v", err, rep.Problems)
	}
	if rep.QueueEntries != int64(len(codecs)*53) {
		t.Fatalf("check counted %d queue entries, want one per record: %d", rep.QueueEntries, len(codecs)*53)
	}
}
