package store

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

func benchStore(b *testing.B, mode FlushDiskType) *Store {
	cfg := DefaultConfig(b.TempDir())
	cfg.FS = vfs.OS{}
	cfg.FlushDiskType = mode
	cfg.CommitLogSegmentBytes = 128 << 20
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 1<<16, 1<<20
	cfg.DiskHardLimitRatio, cfg.DiskMaxUsedSpaceRatio = 100, 100
	s, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

var body1K = strings.Repeat("k", 1024)

func BenchmarkPutAsync(b *testing.B) {
	s := benchStore(b, AsyncFlush)
	m := newMsg("Bench", 0, body1K, nil)
	b.SetBytes(int64(len(body1K)))
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		if r := s.PutMessage(ctx, m); r.Status != PutOK {
			b.Fatal(r.Err)
		}
	}
}

func BenchmarkPutSync(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s := benchStore(b, SyncFlush)
			b.SetBytes(int64(len(body1K)))
			b.ReportAllocs()
			var wg sync.WaitGroup
			per := b.N/writers + 1
			b.ResetTimer()
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := newMsg("Bench", int32(w%8), body1K, nil)
					for range per {
						if r := s.PutMessage(context.Background(), m); r.Status != PutOK {
							b.Error(r.Err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

func BenchmarkGetMessage(b *testing.B) {
	s := benchStore(b, AsyncFlush)
	const n = 20000
	m := newMsg("Bench", 0, body1K, nil)
	for range n {
		s.PutMessage(context.Background(), m)
	}
	for s.MaxOffset("Bench", 0) < n {
		s.notifyDispatcher()
	}
	size := int64(m.StoredSize())
	b.SetBytes(32 * size)
	b.ReportAllocs()
	off := int64(0)
	for b.Loop() {
		r, err := s.GetMessage("Bench", 0, off, 32, 1<<20, nil)
		if err != nil || len(r.Records) != 32 {
			b.Fatal(err)
		}
		r.Release()
		off = (off + 32) % (n - 32)
	}
}

// BenchmarkGetMessageDrain reads a backlog the way the backlog-drain
// workload does: 8 queues filled by batches of 32 (so a queue's records
// lie in contiguous runs of 32 in the CommitLog), 256 records per get,
// queues in turn, 8 results held at a time as responses in flight would.
func BenchmarkGetMessageDrain(b *testing.B) {
	const queues, batch, perQueue, perGet = 8, 32, 4096, 256
	s := benchStore(b, AsyncFlush)
	ms := make([][]*message.Message, queues)
	for q := range ms {
		for range batch {
			ms[q] = append(ms[q], newMsg("Drain", int32(q), body1K, nil))
		}
	}
	for range perQueue / batch {
		for q := range queues {
			if r := s.PutMessages(context.Background(), ms[q]); r.Status != PutOK {
				b.Fatal(r.Err)
			}
		}
	}
	for q := range queues {
		for s.MaxOffset("Drain", int32(q)) < perQueue {
			s.notifyDispatcher()
		}
	}
	b.SetBytes(perGet * int64(ms[0][0].StoredSize()))
	b.ReportAllocs()
	var held [queues]*GetResult
	var offs [queues]int64
	i := 0
	for b.Loop() {
		q := i % queues
		i++
		if held[q] != nil {
			held[q].Release()
		}
		r, err := s.GetMessage("Drain", int32(q), offs[q], perGet, 1<<20, nil)
		if err != nil || len(r.Records) != perGet {
			b.Fatalf("get: %v, %d records", err, len(r.Records))
		}
		held[q] = r
		offs[q] = (offs[q] + perGet) % perQueue
	}
	for _, r := range held {
		if r != nil {
			r.Release()
		}
	}
}

// BenchmarkPutSyncDeferred is the broker's send path under SYNC_FLUSH: 64
// writers each with one deferred put in flight, acknowledged by callback.
func BenchmarkPutSyncDeferred(b *testing.B) {
	const writers = 64
	s := benchStore(b, SyncFlush)
	b.SetBytes(int64(len(body1K)))
	b.ReportAllocs()
	var wg sync.WaitGroup
	per := b.N/writers + 1
	b.ResetTimer()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := []*message.Message{newMsg("Bench", int32(w%8), body1K, nil)}
			done := make(chan PutResult, 1)
			for range per {
				r, pending := s.PutMessagesDeferred(context.Background(), m, func(r PutResult) { done <- r })
				if pending {
					r = <-done
				}
				if r.Status != PutOK {
					b.Error(r.Err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkDispatch measures how fast written records become visible: per
// operation, a batch of 32 messages to 8 queues is put (ASYNC_FLUSH) and
// waited for until the last is in its ConsumeQueue.
func BenchmarkDispatch(b *testing.B) {
	s := benchStore(b, AsyncFlush)
	ms := make([]*message.Message, 32)
	for i := range ms {
		ms[i] = newMsg("Dispatch", int32(i%8), body1K, map[string]string{message.PropKeys: "k1 k2", message.PropUniqKey: "U"})
	}
	b.SetBytes(32 * int64(ms[0].StoredSize()))
	b.ReportAllocs()
	want := int64(0)
	for b.Loop() {
		if r := s.PutMessages(context.Background(), ms); r.Status != PutOK {
			b.Fatal(r.Err)
		}
		want += 4
		for s.MaxOffset("Dispatch", 7) < want {
			runtime.Gosched()
		}
	}
}
