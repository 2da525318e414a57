package dedup_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/broker/dedup"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// BenchmarkCheckNew is the cost a new message pays when the table is
// complete for the window (the steady state): map miss, insert, eviction.
func BenchmarkCheckNew(b *testing.B) {
	clk := time.Now()
	d2, _ := dedup.New(dedup.Config{Window: time.Minute, MaxEntries: 1 << 16, Index: nopIndex{},
		Now: func() time.Time { return clk.Add(2 * time.Minute) }})
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("7F000001%024X", i)
	}
	stored := &message.Message{StoreTimestamp: clk.Add(2 * time.Minute).UnixMilli()}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, release, _ := d2.Check(context.Background(), "Orders", keys[i])
		release(stored, store.PutResult{})
	}
}

// BenchmarkCheckDuplicate is a retry answered from the table.
func BenchmarkCheckDuplicate(b *testing.B) {
	d, _ := dedup.New(dedup.Config{Window: time.Hour, Index: nopIndex{}})
	_, release, _ := d.Check(context.Background(), "Orders", "K")
	release(&message.Message{StoreTimestamp: time.Now().UnixMilli()}, store.PutResult{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if orig, _, _ := d.Check(context.Background(), "Orders", "K"); orig == nil {
			b.Fatal("miss")
		}
	}
}

// BenchmarkCheckNewWithIndex is a new message while the table is not
// complete (after a restart or above MaxEntries per window): four key-index
// lookups on a real store.
func BenchmarkCheckNewWithIndex(b *testing.B) {
	cfg := store.DefaultConfig(b.TempDir())
	cfg.CommitLogSegmentBytes = 64 << 20
	cfg.MaxMessageBytes = 64 << 10
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 1<<16, 1<<20
	st, err := store.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for i := 0; i < 10000; i++ { // an index with content
		m := &message.Message{Topic: "Orders", Body: []byte("x"), Properties: message.EncodeProperties(
			map[string]string{message.PropUniqKey: fmt.Sprintf("U%08d", i), message.PropWaitStoreMsgOK: "false"})}
		st.PutMessage(context.Background(), m)
	}
	d, _ := dedup.New(dedup.Config{Window: time.Hour, Index: st})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, release, err := d.Check(context.Background(), "Orders", fmt.Sprintf("N%08d", i))
		if err != nil {
			b.Fatal(err)
		}
		release(nil, store.PutResult{Status: store.PutUnknownError})
	}
}

// BenchmarkCheckNewStartsEmpty is a new message on a master that started
// on an empty store, through a table that fills and then evicts (b.N
// beyond MaxEntries): map miss and insert, growth, eviction, the evicted
// keys' filter; the index is never needed.
func BenchmarkCheckNewStartsEmpty(b *testing.B) {
	now := time.Now()
	d, _ := dedup.New(dedup.Config{Window: time.Minute, Index: nopIndex{}, StartsEmpty: true,
		Now: func() time.Time { return now }})
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("7F0000010D2A18B4AAC2%012X", i)
	}
	stored := &message.Message{StoreTimestamp: now.UnixMilli()}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, release, _ := d.Check(context.Background(), "keel-bench-official-rocketmq-cpu-0", keys[i])
		release(stored, store.PutResult{Status: store.PutOK})
	}
	if s := d.Stats(); s.IndexLookups > int64(b.N)/20 {
		b.Fatalf("%d index lookups for %d new keys", s.IndexLookups, b.N)
	}
}
