package store

import (
	"fmt"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// fileReadConfig is testConfig without the CommitLog's read window, for
// the tests of what reads of the segment files do (runs, read-ahead,
// faults of the disk).
func fileReadConfig(fs vfs.FS) Config {
	cfg := testConfig(fs)
	cfg.ReadWindowBytes = -1
	return cfg
}

// putInterleaved stores n messages in each of queues queues of topic T,
// one put at a time, round-robin: in the CommitLog no two messages of a
// queue are next to each other.
func putInterleaved(t *testing.T, s *Store, queues, n int) [][]*message.Message {
	t.Helper()
	out := make([][]*message.Message, queues)
	for i := range n {
		for q := range queues {
			m := newMsg("T", int32(q), fmt.Sprintf("q%d-%d-%s", q, i, strings.Repeat("b", 1000)), nil)
			put(t, s, m)
			out[q] = append(out[q], m)
		}
	}
	for q := range queues {
		waitVisible(t, s, "T", int32(q), int64(n))
	}
	return out
}

// Consumers keeping up read what was just written: a pull of 32 messages
// of a queue interleaved with seven others reads no segment file (the
// read window serves them); the dispatcher reads the file all the same
// (its read-back checks the write path). Without the window the same pulls
// take one pread per message.
func TestGetMessageOverInterleavedQueuesReadsMemory(t *testing.T) {
	for _, window := range []bool{true, false} {
		t.Run(fmt.Sprint("window=", window), func(t *testing.T) {
			fs := &preadCountFS{FS: vfs.NewMem()}
			cfg := testConfig(fs)
			if !window {
				cfg = fileReadConfig(fs)
			}
			cfg.FlushDiskType = SyncFlush
			cfg.CommitLogSegmentBytes = 4 << 20 // the messages in one segment, as in production (1 GiB)
			s := mustOpen(t, cfg)
			defer s.Close()
			opened := fs.reads.Load()
			msgs := putInterleaved(t, s, 8, 32)
			dispatched := fs.reads.Load()
			st0 := s.Stats()
			for q := range 8 {
				r, err := s.GetMessage("T", int32(q), 0, 32, 1<<20, nil)
				if err != nil || r.Status != Found {
					t.Fatalf("queue %d: %v %v", q, r.Status, err)
				}
				checkRecords(t, r, msgs[q])
				r.Release()
			}
			preads := fs.reads.Load() - dispatched
			st := s.Stats()
			hits, misses := st.WindowHits-st0.WindowHits, st.WindowMisses-st0.WindowMisses
			if window && (hits < 8*32 || misses != 0) || !window && (hits != 0 || misses < 8*32) {
				t.Fatalf("window %v: the stats count %d window hits and %d misses for 8 pulls of 32 messages", window, hits, misses)
			}
			if window {
				if dispatched == opened || preads != 0 {
					t.Fatalf("with the read window: %d preads dispatching (want some), %d for 8 pulls of 32 messages (want 0)", dispatched-opened, preads)
				}
				return
			}
			if preads < 8*32 {
				t.Fatalf("without the read window: %d preads for 8 pulls of 32 interleaved messages, want one each", preads)
			}
		})
	}
}

// The read window's default is on, and a negative size turns it off.
func TestReadWindowConfig(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	if got := cfg.readWindowBytes(); got != DefaultReadWindowBytes {
		t.Fatalf("default read window %d, want %d", got, DefaultReadWindowBytes)
	}
	cfg.ReadWindowBytes = 1 << 20
	if got := cfg.readWindowBytes(); got != 1<<20 {
		t.Fatalf("read window %d, want %d", got, 1<<20)
	}
	cfg.ReadWindowBytes = -1
	if got := cfg.readWindowBytes(); got != 0 {
		t.Fatalf("read window turned off: %d", got)
	}
}
