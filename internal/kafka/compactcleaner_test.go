package kafka

import (
	"context"
	"io"
	"log/slog"
	"path"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCleanerOnReplicaThenPromoted: a broker without a door (a slave:
// the master's CommitLog and topics, byte for byte, and none of the
// master's copies) cleans with its own Cleaner to the same latest record
// per key as the master's door, holds its CommitLog from its cleaned
// point, and once promoted (a door on the same data directory) serves the
// copy it wrote.
func TestCleanerOnReplicaThenPromoted(t *testing.T) {
	fs := vfs.NewMem()
	n := compactNode(t, fs, 10*time.Millisecond)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact"),
		"min.cleanable.dirty.ratio": kmsg.StringPtr("0")}, "rep"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	for v := range 5 {
		var rs []*kgo.Record
		for k := range 25 {
			r := &kgo.Record{Topic: "rep", Key: []byte{'k', byte('a' + k)}, Value: []byte{'v', byte('0' + v)}}
			if v == 4 && k%5 == 0 {
				r.Value = nil
			}
			rs = append(rs, r)
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cleanedTo(t, n, "rep", 0)
	masterLatest := readLatest(t, n, "rep")

	// The replica: the master's durable bytes without its copies.
	rfs := fs.CrashClone()
	names, err := rfs.List("/data/" + compactDir)
	if err != nil || len(names) == 0 {
		t.Fatalf("the master's copies: %v %v", names, err)
	}
	for _, name := range names {
		if err := rfs.Remove(path.Join("/data", compactDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	scfg := store.DefaultConfig("/data")
	scfg.FS, scfg.FlushDiskType = rfs, store.SyncFlush
	scfg.CommitLogSegmentBytes, scfg.ConsumeQueueSegmentEntries = 64<<20, 10000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 100, 400
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := core.New(core.Config{DataDir: "/data", FS: rfs, DefaultTopicQueueNums: 2, MaxMessageSize: 4 << 20}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := NewCleaner(Config{DataDir: "/data", FS: rfs, CompactionInterval: 10 * time.Millisecond}, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- kc.Run(context.Background()) }()
	hwm := st.MaxOffset("rep", 0)
	cleaned := int64(-1)
	waitUntil(t, "the replica's cleaner to reach the end", func() bool {
		if p := kc.x.lookup(queueKey{"rep", 0}); p != nil {
			p.mu.RLock()
			defer p.mu.RUnlock()
			if p.cp != nil {
				cleaned = p.cp.cleaned
			}
		}
		return cleaned == hwm
	})
	if h := kc.x.holdsInto(nil)["rep"][0]; h != hwm {
		t.Fatalf("the replica holds its CommitLog from %d, want its cleaned point %d", h, hwm)
	}
	kc.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.Close()
	st.Close()

	// Promoted: a door on the replica's data directory serves its copy.
	p := compactNode(t, rfs, time.Hour)
	if cp := p.srv.compact.lookup(queueKey{"rep", 0}); cp == nil || cp.cp == nil || cp.cp.cleaned != hwm {
		t.Fatal("the promoted replica's door did not open the copy its cleaner wrote")
	}
	if err := sameLatest(readLatest(t, p, "rep"), masterLatest); err != nil {
		t.Fatalf("the promoted replica against the master: %v", err)
	}
	if got := readLatest(t, p, "rep"); len(got) != 25 {
		t.Fatalf("%d keys", len(got))
	}
}
