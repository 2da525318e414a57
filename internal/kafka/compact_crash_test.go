package kafka

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/translate"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// crashFS is a MemFS that, while on, keeps before every change made
// through it what a power loss at that point would leave: the durable
// state alone (CrashClone) and with a random subset of the unsynced pages
// written back (CrashCloneWriteBack).
type crashFS struct {
	*vfs.MemFS
	on     atomic.Bool
	mu     sync.Mutex
	rng    *rand.Rand
	clones []*vfs.MemFS
}

func (c *crashFS) point() {
	if !c.on.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clones = append(c.clones, c.MemFS.CrashClone(), c.MemFS.CrashCloneWriteBack(c.rng))
}

// take returns the clones kept so far and forgets them.
func (c *crashFS) take() []*vfs.MemFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.clones
	c.clones = nil
	return out
}

func (c *crashFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if flag&(os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_RDWR) != 0 {
		c.point()
	}
	f, err := c.MemFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return crashFile{f, c}, nil
}

func (c *crashFS) Remove(name string) error { c.point(); return c.MemFS.Remove(name) }
func (c *crashFS) Rename(a, b string) error { c.point(); return c.MemFS.Rename(a, b) }
func (c *crashFS) SyncDir(dir string) error { c.point(); return c.MemFS.SyncDir(dir) }

type crashFile struct {
	vfs.File
	c *crashFS
}

func (f crashFile) WriteAt(p []byte, off int64) (int, error) {
	f.c.point()
	return f.File.WriteAt(p, off)
}
func (f crashFile) Sync() error            { f.c.point(); return f.File.Sync() }
func (f crashFile) Truncate(n int64) error { f.c.point(); return f.File.Truncate(n) }

// readLatest reads partition 0 of topic from its log start to its high
// watermark through the door's fetch path and returns the last value read
// per key ("<nil>" for a tombstone).
func readLatest(t *testing.T, n *testNode, topic string) map[string]string {
	t.Helper()
	start, hwm, err := n.srv.partitionBounds(topic, n.srv.parts.get(topic, 0))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for off := start; off < hwm; {
		var rp kmsg.FetchResponseTopicPartition
		n.srv.fetchPartition(topic, kmsg.FetchRequestTopicPartition{Partition: 0, FetchOffset: off, PartitionMaxBytes: 1 << 20}, 1<<20, false, &rp)
		if rp.ErrorCode != errNone {
			t.Fatalf("fetch at %d: error %d", off, rp.ErrorCode)
		}
		next, b := off, rp.RecordBatches
		for len(b) > 0 {
			size := 12 + int(binary.BigEndian.Uint32(b[8:]))
			batch := b[:size]
			b = b[size:]
			next = max(next, int64(binary.BigEndian.Uint64(batch))+int64(binary.BigEndian.Uint32(batch[23:]))+1)
			err := translate.EachKafkaRecord(batch, translate.DefaultLimit, func(r *translate.KafkaRecord) error {
				if r.Offset >= off {
					if r.Value == nil {
						out[string(r.Key)] = "<nil>"
					} else {
						out[string(r.Key)] = string(r.Value)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("batch at %d: %v", off, err)
			}
		}
		if next <= off {
			t.Fatalf("fetch at %d moved nothing (high watermark %d)", off, hwm)
		}
		off = next
	}
	return out
}

func sameLatest(got, want map[string]string) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("key %s: %q, want %q", k, got[k], v)
		}
	}
	return nil
}

// TestCompactionCrashSafe crashes two cleaning passes of a compacted
// partition (the first, with no copy yet, and one that rewrites the copy
// with new records) at every change they make to the filesystem — before
// each create, write, sync, rename, directory sync and removal — keeping
// either only the durable state or a random subset of the unsynced pages.
// Every crash leaves a copy that covers the partition up to where the
// store's age hold let it delete the CommitLog, and a node that, once
// restarted, reads the latest value of every key (tombstones included),
// and cleans on to the same.
func TestCompactionCrashSafe(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	defer func(n int) { maxWriteBuffer = n }(maxWriteBuffer)
	maxWriteBuffer = 700 // several writes per copy

	mem := vfs.NewMem()
	cfs := &crashFS{MemFS: mem, rng: rand.New(rand.NewPCG(uint64(seed), 0))}
	n := startNodeWith(t, mem, Config{DataDir: "/data", FS: cfs, CompactionInterval: time.Hour})
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact,delete"),
		"retention.ms": kmsg.StringPtr("-1"), "delete.retention.ms": kmsg.StringPtr("3600000"),
		"min.cleanable.dirty.ratio": kmsg.StringPtr("0.1")}, "crash"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	want := map[string]string{}
	produce := func(round, keys, versions int, tombEvery int) {
		for v := range versions {
			var rs []*kgo.Record
			for k := range keys {
				key := fmt.Sprintf("k%02d", k)
				val := fmt.Sprintf("r%d-v%d-%s", round, v, key)
				r := &kgo.Record{Topic: "crash", Key: []byte(key), Value: []byte(val)}
				if tombEvery > 0 && v == versions-1 && k%tombEvery == 0 {
					r.Value, val = nil, "<nil>"
				}
				rs = append(rs, r)
				want[key] = val
				if len(rs) == 7 {
					if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
						t.Fatal(err)
					}
					rs = nil
				}
			}
			if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	pass := func() (map[string]string, []*vfs.MemFS) {
		snapshot := make(map[string]string, len(want))
		for k, v := range want {
			snapshot[k] = v
		}
		cfs.on.Store(true)
		err := n.srv.compact.clean("crash", 0)
		cfs.on.Store(false)
		if err != nil {
			t.Fatal(err)
		}
		if got := readLatest(t, n, "crash"); sameLatest(got, snapshot) != nil {
			t.Fatalf("after the pass: %v", sameLatest(got, snapshot))
		}
		return snapshot, append(cfs.take(), mem.CrashClone())
	}
	produce(1, 30, 3, 5)
	want1, clones1 := pass()
	// From here the store may delete every CommitLog segment below the
	// cleaned point (its age hold): no crash may leave a copy that stops
	// short of it.
	held := n.srv.ageHolds()["crash"][0]
	if p := n.srv.compact.lookup(queueKey{"crash", 0}); p == nil || p.cp == nil || held != p.cp.cleaned || held == 0 {
		t.Fatalf("hold %d after the first pass, want the copy's cleaned point", held)
	}
	produce(2, 15, 2, 4)
	want2, clones2 := pass()
	hwm := n.st.MaxOffset("crash", 0)
	n.stop()

	check := func(which string, i int, clone *vfs.MemFS, want map[string]string) (cleaned int64) {
		t.Helper()
		cn := startNodeWith(t, clone, Config{DataDir: "/data", FS: clone, CompactionInterval: time.Hour})
		defer cn.stop()
		if err := sameLatest(readLatest(t, cn, "crash"), want); err != nil {
			t.Fatalf("%s crash %d (seed %d): after the restart: %v", which, i, seed, err)
		}
		if err := cn.srv.compact.clean("crash", 0); err != nil {
			t.Fatalf("%s crash %d: cleaning after the restart: %v", which, i, err)
		}
		if err := sameLatest(readLatest(t, cn, "crash"), want); err != nil {
			t.Fatalf("%s crash %d (seed %d): cleaned after the restart: %v", which, i, seed, err)
		}
		if p := cn.srv.compact.lookup(queueKey{"crash", 0}); p != nil && p.cp != nil {
			return p.cp.cleaned
		}
		return 0
	}
	states := map[string]int{}
	for i, c := range clones1 {
		check("first pass", i, c, want1)
	}
	for i, c := range clones2 {
		cleaned := int64(0) // which copy the crash left

		if latest, _, err := findCopies(c, "/data/"+compactDir); err == nil {
			for k, gen := range latest {
				if cp, err := openCopy(c, "/data/"+compactDir, k, gen); err == nil {
					cleaned = cp.cleaned
					cp.f.Close()
				}
			}
		}
		if cleaned < held {
			t.Fatalf("second pass crash %d (seed %d): the copy left covers up to %d, the store held only from %d", i, seed, cleaned, held)
		}
		if cleaned == hwm {
			states["new"]++
		} else {
			states["old"]++
		}
		check("second pass", i, c, want2)
	}
	if len(clones1) < 10 || len(clones2) < 10 || states["new"] == 0 || states["old"] == 0 {
		t.Fatalf("crash points: %d and %d, second pass left the old copy %d times and the new %d: the test does not cover both", len(clones1), len(clones2), states["old"], states["new"])
	}
	t.Logf("crash points: first pass %d, second pass %d (old copy left %d, new %d)", len(clones1), len(clones2), states["old"], states["new"])
}
