package store

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// TestRestartProfile measures Open of a real store on disk after a clean
// shutdown: KEEL_RESTART_DIR names the store directory (filled on first use
// with KEEL_RESTART_GIB GiB of 1 KiB messages over 1,000 topics x 4 queues,
// like bench/workloads/many-topics.yaml), KEEL_RESTART_CPUPROFILE a file for
// the CPU profile of the Opens. It is a measuring tool, skipped unless
// KEEL_RESTART_DIR is set; it asserts nothing about time.
func TestRestartProfile(t *testing.T) {
	dir := os.Getenv("KEEL_RESTART_DIR")
	if dir == "" {
		t.Skip("KEEL_RESTART_DIR not set")
	}
	cfg := DefaultConfig(dir)
	cfg.FS = vfs.OS{}
	cfg.FlushDiskType = AsyncFlush
	cfg.DiskHardLimitRatio, cfg.DiskMaxUsedSpaceRatio = 100, 100
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	if _, err := os.Stat(filepath.Join(dir, checkpointName)); err != nil {
		gib, _ := strconv.ParseFloat(os.Getenv("KEEL_RESTART_GIB"), 64)
		if gib <= 0 {
			gib = 3
		}
		fillManyTopics(t, cfg, int64(gib*(1<<30)))
	}
	runs := 3
	if n, err := strconv.Atoi(os.Getenv("KEEL_RESTART_RUNS")); err == nil && n > 0 {
		runs = n
	}
	if path := os.Getenv("KEEL_RESTART_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	for range runs {
		t0 := time.Now()
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		open := time.Since(t0)
		res, queues := s.recovered, len(s.allQueues())
		t1 := time.Now()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("clean Open %v (scanned from %d to %d, %d records, %d queues); Close %v",
			open, res.ScannedFrom, res.End, res.Records, queues, time.Since(t1))
	}
}

func fillManyTopics(t *testing.T, cfg Config, bytes int64) {
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const topics, queues, writers = 1000, 4, 8
	per := bytes / int64(len(body1K)+200) / writers
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				k := int(i)*writers + w
				m := newMsg(fmt.Sprintf("T%04d", k%topics), int32(k/topics%queues), body1K, nil)
				if r := s.PutMessage(context.Background(), m); r.Status != PutOK {
					t.Error(r.Err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
