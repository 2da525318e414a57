package store

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// spaceKeys is an IndexKeys hook for the tests: the body's
// space-separated words are the keys; a body starting with "!" does not
// decode after its first word.
func spaceKeys(rec []byte, key func([]byte)) error {
	for i, w := range bytes.Fields(record.Envelope(rec).Body()) {
		if w[0] == '!' {
			if i == 0 {
				key(w[1:])
			}
			return errors.New("undecodable")
		}
		key(w)
	}
	return nil
}

// TestIndexEnvelopeKeys: the keys Config.IndexKeys names for a record of
// another type are indexed under each of its destination topics, a body
// that does not decode keeps the keys named before and is still
// dispatched, and a crash before the index is flushed loses none (Open
// indexes again from the checkpoint).
func TestIndexEnvelopeKeys(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.FlushDiskType = SyncFlush
	cfg.FlushConsumeQueueInterval = time.Hour // no checkpoint: the crash loses the index's progress
	cfg.IndexKeys = spaceKeys
	s := mustOpen(t, cfg)
	a := putEnvelope(t, s, record.AMQP, 0, 1, []record.Dest{{Topic: "A", QueueID: 0}, {Topic: "B", QueueID: 1}, {Topic: "A", QueueID: 1}}, []byte("m-1 c-1"))
	k := putEnvelope(t, s, record.KafkaBatch, 0, 1, []record.Dest{{Topic: "A", QueueID: 0}}, []byte("!bad rest"))
	waitVisible(t, s, "A", 0, 2)
	check := func(when string) {
		t.Helper()
		for _, q := range []struct {
			topic, key string
			want       []int64
		}{{"A", "m-1", []int64{a}}, {"A", "c-1", []int64{a}}, {"B", "m-1", []int64{a}}, {"B", "c-1", []int64{a}},
			{"A", "bad", []int64{k}}, {"A", "rest", nil}, {"B", "bad", nil}} {
			got, err := s.QueryByKey(q.topic, q.key, 10, 0, 1<<62)
			if err != nil || fmt.Sprint(got) != fmt.Sprint(q.want) {
				t.Errorf("%s: %s#%s: %v %v, want %v", when, q.topic, q.key, got, err, q.want)
			}
		}
	}
	check("dispatched")
	s.Close()
	s = mustOpen(t, cfg)
	check("reopened")
	s.Close()

	// Records put after the checkpoint the last Close wrote, then a crash:
	// their index entries were never flushed.
	s = mustOpen(t, cfg)
	b := putEnvelope(t, s, record.AMQP, 0, 1, []record.Dest{{Topic: "A", QueueID: 0}}, []byte("m-2"))
	waitVisible(t, s, "A", 0, 3)
	crashed := fs.CrashClone()
	s.Close()
	cfg.FS = crashed
	s = mustOpen(t, cfg)
	defer s.Close()
	check("after the crash")
	if got, _ := s.QueryByKey("A", "m-2", 10, 0, 1<<62); fmt.Sprint(got) != fmt.Sprint([]int64{b}) {
		t.Errorf("after the crash: A#m-2: %v, want [%d]", got, b)
	}
}

// An empty key named by Config.IndexKeys is left out: the record is
// dispatched, its other keys indexed, and the store stays writable.
func TestIndexEnvelopeEmptyKeySkipped(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	cfg.IndexKeys = func(rec []byte, key func([]byte)) error {
		key(nil)
		return spaceKeys(rec, key)
	}
	s := mustOpen(t, cfg)
	defer s.Close()
	a := putEnvelope(t, s, record.AMQP, 0, 1, []record.Dest{{Topic: "A", QueueID: 0}}, []byte("m-1"))
	waitVisible(t, s, "A", 0, 1)
	if got, err := s.QueryByKey("A", "m-1", 10, 0, 1<<62); err != nil || fmt.Sprint(got) != fmt.Sprint([]int64{a}) {
		t.Fatalf("A#m-1: %v %v, want [%d]", got, err, a)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("the store failed: %v", err)
	}
	putEnvelope(t, s, record.AMQP, 0, 1, []record.Dest{{Topic: "A", QueueID: 0}}, []byte("m-2"))
	waitVisible(t, s, "A", 0, 2)
}
