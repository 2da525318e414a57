package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

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
