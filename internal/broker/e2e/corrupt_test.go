package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/testcluster"
)

// TestPushConsumerPassesACorruptRecord: a record corrupted at rest does not
// hold a push consumer of the official client at its offset: the
// consumer gets every intact message after it and never the
// corrupt one, and the broker lists it as isolated.
func TestPushConsumerPassesACorruptRecord(t *testing.T) {
	// At rest: the store reads every record from its file (no read window,
	// which would serve the record as it was written).
	c := startCluster(t, func(c *store.Config) { c.ReadWindowBytes = -1 })
	topic := testcluster.Uniq("Corrupt")
	c.CreateTopic(topic, 1)
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var victim *primitive.SendResult
	for i := 0; i < 20; i++ {
		res, err := p.SendSync(ctx, msg(topic, "", fmt.Sprintf("m-%02d", i)))
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, res, err)
		}
		if i == 7 {
			victim = res
		}
	}
	testcluster.WaitFor(t, 10*time.Second, "dispatch", func() bool { return c.Store().MaxOffset(topic, 0) == 20 })

	// Flip a byte of m-07's body in the CommitLog segment on disk.
	_, phys, err := message.ParseOffsetMsgID(victim.OffsetMsgID)
	if err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(c.Dir(), "commitlog", fmt.Sprintf("%020d", 0))
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 512)
	n, _ := f.ReadAt(rec, phys)
	at := bytes.Index(rec[:n], []byte("m-07"))
	if at < 0 {
		t.Fatal("body of m-07 not found at its offset")
	}
	if _, err := f.WriteAt([]byte("X"), phys+int64(at)); err != nil {
		t.Fatal(err)
	}
	f.Close()

	r := newReceived()
	startConsumer(t, newPushConsumer(t, c, testcluster.Uniq("cg")), topic, "*", r)
	testcluster.WaitFor(t, 30*time.Second, "the 19 intact messages", func() bool { return r.count() >= 19 })
	for i := 0; i < 20; i++ {
		body := fmt.Sprintf("m-%02d", i)
		if i != 7 && !r.has(body) {
			t.Errorf("intact message %s not consumed", body)
		}
	}
	if r.has("m-07") || r.has("X-07") || r.count() != 19 {
		t.Fatalf("the corrupt record was delivered (%d distinct messages)", r.count())
	}
	iso := c.Store().Isolated()
	if len(iso) != 1 || iso[0].Topic != topic || iso[0].QueueOffset != 7 || iso[0].PhysOffset != phys {
		t.Fatalf("isolated %+v, want %s/0 offset 7 at %d", iso, topic, phys)
	}
}
