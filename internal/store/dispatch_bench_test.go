package store

import (
	"testing"

	"github.com/keelmq/keel/internal/message"
)

// BenchmarkDispatchRecord is the dispatcher's work for one RocketMQ record
// (two keys and a unique key), without the CommitLog read and the
// dispatcher's wake-up: the ConsumeQueue append, the index entries and the
// subscribers. CPU-bound, so steadier than BenchmarkDispatch.
func BenchmarkDispatchRecord(b *testing.B) {
	s := benchStore(b, AsyncFlush)
	m := newMsg("DispatchRecord", 0, body1K, map[string]string{message.PropKeys: "k1 k2", message.PropUniqKey: "U"})
	rec, err := m.AppendStored(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	s.dispatchMu.Lock()
	defer s.dispatchMu.Unlock()
	qo, phys := int64(0), int64(1<<40) // far from anything written
	for b.Loop() {
		message.PatchStored(rec, qo, phys, 1)
		if err := s.dispatchRecord(rec, phys); err != nil {
			b.Fatal(err)
		}
		qo++
		phys += int64(len(rec)) + 4
	}
}
