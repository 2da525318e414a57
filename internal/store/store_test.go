package store

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// fakeClock is an injected clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 10, 0, 0, 0, time.Local)}
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
func (c *fakeClock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func testConfig(fs vfs.FS) Config {
	cfg := DefaultConfig("/data")
	cfg.FS = fs
	cfg.CommitLogSegmentBytes = 64 << 10
	cfg.ConsumeQueueSegmentEntries = 100
	cfg.MaxMessageBytes = 8 << 10
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 64, 1000
	cfg.FlushInterval = 10 * time.Millisecond
	cfg.FlushConsumeQueueInterval = 50 * time.Millisecond
	cfg.RetentionCheckInterval = time.Hour
	cfg.DiskReserveBytes = 0 // the tests' disks are tiny: the ratios alone decide
	return cfg
}

// mustOpen opens a store and waits for the retention goroutine's disk check
// at start, so that a test that then changes the free space (most set an
// hour between later checks) sees no check it did not ask for.
func mustOpen(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.diskCheckedAt.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no disk check at start")
		}
		time.Sleep(100 * time.Microsecond)
	}
	return s
}

func newMsg(topic string, qid int32, body string, props map[string]string) *message.Message {
	return &message.Message{
		Topic: topic, QueueID: qid, Body: []byte(body), BornTimestamp: 1,
		BornHost:   netip.MustParseAddrPort("10.0.0.1:5000"),
		StoreHost:  netip.MustParseAddrPort("10.0.0.2:10911"),
		Properties: message.EncodeProperties(props),
	}
}

func put(t testing.TB, s *Store, m *message.Message) {
	t.Helper()
	if r := s.PutMessage(context.Background(), m); r.Status != PutOK {
		t.Fatalf("put: %v %v", r.Status, r.Err)
	}
}

// waitVisible waits until (topic, qid) has max offset n.
func waitVisible(t testing.TB, s *Store, topic string, qid int32, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.MaxOffset(topic, qid) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s/%d: max offset %d, want %d", topic, qid, s.MaxOffset(topic, qid), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func bodies(r *GetResult) []string {
	var out []string
	for _, rec := range r.Records {
		out = append(out, string(message.View(rec).Body()))
	}
	return out
}

func TestPutGetReopen(t *testing.T) {
	for _, mode := range []FlushDiskType{SyncFlush, AsyncFlush} {
		t.Run(mode.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			cfg := testConfig(fs)
			cfg.FlushDiskType = mode
			s := mustOpen(t, cfg)
			for i := range 10 {
				m := newMsg("T", int32(i%2), fmt.Sprintf("m%d", i), nil)
				put(t, s, m)
				if m.QueueOffset != int64(i/2) {
					t.Fatalf("queue offset %d, want %d", m.QueueOffset, i/2)
				}
			}
			waitVisible(t, s, "T", 0, 5)
			waitVisible(t, s, "T", 1, 5)
			r, err := s.GetMessage("T", 0, 0, 32, 1<<20, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != Found || r.NextOffset != 5 || fmt.Sprint(bodies(r)) != "[m0 m2 m4 m6 m8]" {
				t.Fatalf("got %v next %d %v", r.Status, r.NextOffset, bodies(r))
			}
			r.Release()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal("second close:", err)
			}
			s = mustOpen(t, cfg)
			defer s.Close()
			if last := s.log.Segments(); s.recovered.ScannedFrom != last[len(last)-1].Base {
				t.Fatalf("clean restart verified from %d, not only the last segment", s.recovered.ScannedFrom)
			}
			r, err = s.GetMessage("T", 1, 2, 32, 1<<20, nil)
			if err != nil || fmt.Sprint(bodies(r)) != "[m5 m7 m9]" {
				t.Fatalf("after reopen: %v %v", bodies(r), err)
			}
			m := newMsg("T", 1, "m10", nil)
			put(t, s, m)
			if m.QueueOffset != 5 {
				t.Fatalf("offset after reopen %d", m.QueueOffset)
			}
			phys := message.View(r.Records[0]).PhysOffset()
			rec, err := s.LookMessageByOffset(phys)
			if err != nil || !bytes.Equal(rec, r.Records[0]) {
				t.Fatalf("LookMessageByOffset(%d): %v", phys, err)
			}
		})
	}
}

// A clean restart verifies the tail (verifyTailBytes before the flushed
// offset, lowered here to 8 KiB), not the whole log.
func TestCleanRestartVerifiesTheTailAcrossSegments(t *testing.T) {
	withVerifyTail(t, 8<<10)
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	s := mustOpen(t, cfg)
	for i := range 50 {
		put(t, s, newMsg("T", 0, fmt.Sprintf("%d-%s", i, make([]byte, 4000)), nil))
	}
	s.Close()
	s = mustOpen(t, cfg)
	segs := s.log.Segments()
	if end := s.log.WrittenOffset(); len(segs) < 3 || s.recovered.ScannedFrom < segs[len(segs)-2].Base || s.recovered.ScannedFrom > end-8<<10 {
		t.Fatalf("clean restart scanned from %d (%d segments, end %d)", s.recovered.ScannedFrom, len(segs), end)
	}
	s.Close()
	// Without the abort marker removed (a crash) and without a checkpoint,
	// everything is verified.
	fs.Remove("/data/checkpoint")
	s = mustOpen(t, cfg)
	defer s.Close()
	if s.recovered.ScannedFrom != 0 || s.recovered.Records != 50 {
		t.Fatalf("full scan: from %d, %d records", s.recovered.ScannedFrom, s.recovered.Records)
	}
	if s.MaxOffset("T", 0) != 50 {
		t.Fatal("queue lost entries")
	}
}
