package store

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// scrubDriver runs a store's scrubber by hand: each tick advances the
// injected clock by step, then hands the scrubber a tick.
type scrubDriver struct {
	clock *fakeClock
	ticks chan time.Time
	step  time.Duration
}

func newScrubDriver(cfg *Config, rate int64, step time.Duration) *scrubDriver {
	d := &scrubDriver{clock: newFakeClock(), ticks: make(chan time.Time), step: step}
	cfg.Now = d.clock.Now
	cfg.ScrubBytesPerSecond = rate
	cfg.ScrubPassInterval = -1 // passes follow each other
	cfg.ScrubTicker = func() (<-chan time.Time, func()) { return d.ticks, func() {} }
	return d
}

// tick advances the clock and delivers a tick. The unbuffered send returns
// once the scrubber took it, so the previous tick's work is done.
func (d *scrubDriver) tick() {
	d.clock.Add(d.step)
	d.ticks <- d.clock.Now()
}

// barrier delivers a tick without advancing the clock (no new budget):
// when it returns, the work of every earlier tick is done.
func (d *scrubDriver) barrier() { d.ticks <- d.clock.Now() }

// tickUntil ticks until cond holds (at most max ticks).
func (d *scrubDriver) tickUntil(t *testing.T, max int, cond func() bool) {
	t.Helper()
	for i := 0; i < max; i++ {
		if cond() {
			return
		}
		d.tick()
		d.barrier()
	}
	if !cond() {
		t.Fatalf("condition not reached after %d ticks", max)
	}
}

// A bit flipped at rest in a cold segment (where Open does not verify) is
// found by the scrubber without any consumer reading it: reported as a
// Problem, isolated with its queue entry, and skipped by consumers.
func TestScrubberFindsBitFlipAtRest(t *testing.T) {
	withVerifyTail(t, fixtureTail) // the damage is where Open does not verify
	fx := newCorruptFixture(t, true)
	victim := fx.msgs[2] // first segment: cold
	fx.patch(t, victim.phys+200, 1, func(b []byte) { b[0] ^= 0x20 })
	before := fx.segmentBytes(t, victim.phys)
	d := newScrubDriver(&fx.cfg, 64<<10, time.Second)
	s := mustOpen(t, fx.cfg)
	defer s.Close()

	d.tickUntil(t, 100, func() bool { return len(s.Isolated()) > 0 })
	want := IsolatedRecord{Topic: "T", QueueID: 0, QueueOffset: 2, PhysOffset: victim.phys, Size: int32(fx.sizes[2]), FoundBy: FoundByScrub}
	checkIsolated(t, s.Isolated(), want)
	st := s.ScrubStatus()
	if st.Problems != 1 || len(st.Recent) != 1 {
		t.Fatalf("scrub status %+v, want one problem", st)
	}
	p := st.Recent[0]
	if p.Offset != victim.phys || !strings.HasSuffix(p.File, commitlog.SegmentName(0)) || !strings.Contains(p.Msg, "corrupt entry") {
		t.Fatalf("problem %v", p)
	}
	if s.Stats().Gets != 0 {
		t.Fatal("a read found it, not the scrubber")
	}
	// Consumers skip it; their read does not register it a second time.
	if served := readQueueAll(t, s, fx.msgs); len(served) != len(fx.msgs)-1 {
		t.Fatalf("served %d of %d intact records", len(served), len(fx.msgs)-1)
	}
	checkIsolated(t, s.Isolated(), want)
	// The scrubber goes on past it to the end of the store and starts again
	// without finding more.
	d.tickUntil(t, 100, func() bool { return s.ScrubStatus().Passes >= 2 })
	st = s.ScrubStatus()
	if st.Problems < 2 || st.Problems > st.Passes+1 {
		t.Fatalf("%d problems in %d passes, want the record once per pass", st.Problems, st.Passes)
	}
	for _, p := range st.Recent {
		if p.Offset != victim.phys {
			t.Fatalf("problem elsewhere: %v", p)
		}
	}
	checkIsolated(t, s.Isolated(), want)
	if !bytes.Equal(fx.segmentBytes(t, victim.phys), before) {
		t.Fatal("the scrubber changed the segment")
	}
}

// A ConsumeQueue entry pointing at the wrong record (damaged at rest) is
// found and reported in keel check's terms.
func TestScrubberFindsBadQueueEntry(t *testing.T) {
	fx := newCorruptFixture(t, true)
	names, err := fx.fs.List("/data/consumequeue/T/0")
	if err != nil || len(names) == 0 {
		t.Fatalf("consume queue files: %v %v", names, err)
	}
	// Point entry 4 at record 3 (a valid record of another offset).
	f, err := fx.fs.OpenFile("/data/consumequeue/T/0/"+names[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var e [20]byte
	f.ReadAt(e[:], 3*20)
	f.WriteAt(e[:], 4*20)
	f.Sync()
	f.Close()
	d := newScrubDriver(&fx.cfg, 64<<10, time.Second)
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	d.tickUntil(t, 100, func() bool { return s.ScrubStatus().Passes >= 1 })
	st := s.ScrubStatus()
	// Both checks see it: record 4's entry does not point at it, and the
	// entry does not come after the one before it.
	pointsElsewhere, outOfOrder := false, false
	for _, p := range st.Recent {
		if p.Offset != 4 || !strings.HasSuffix(p.File, "consumequeue/T/0") {
			t.Fatalf("problem elsewhere: %v", p)
		}
		pointsElsewhere = pointsElsewhere || strings.Contains(p.Msg, "not at its record at")
		outOfOrder = outOfOrder || strings.Contains(p.Msg, "not after the entry before it")
	}
	if !pointsElsewhere || !outOfOrder {
		t.Fatalf("bad entry reported as %v", st.Recent)
	}
}

// The scrubber reads at most its rate: over any run of ticks, at most
// rate × elapsed plus one record, and each tick at most one second's
// budget plus one record. It also keeps up with the rate.
func TestScrubberRateBound(t *testing.T) {
	fx := newCorruptFixture(t, true)
	const rate = 8 << 10 // bytes/s, about 1.5 records
	step := 250 * time.Millisecond
	d := newScrubDriver(&fx.cfg, rate, step)
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	maxEntry := int64(0)
	for _, n := range fx.sizes {
		maxEntry = max(maxEntry, int64(n)+commitlog.TrailerBytes)
	}
	total := int64(0)
	for _, n := range fx.sizes {
		total += int64(n) + commitlog.TrailerBytes
	}
	var prev int64
	for i := 1; s.ScrubStatus().Passes == 0; i++ {
		if i > 1000 {
			t.Fatal("no pass completed")
		}
		d.tick()
		d.barrier()
		got := s.ScrubStatus().Bytes
		elapsed := float64(i) * step.Seconds()
		if float64(got) > rate*elapsed+float64(maxEntry) {
			t.Fatalf("tick %d: %d bytes read in %.2f s at %d B/s (bound %d)", i, got, elapsed, rate, int64(rate*elapsed)+maxEntry)
		}
		if got-prev > rate+maxEntry {
			t.Fatalf("tick %d read %d bytes, more than a second's budget plus a record", i, got-prev)
		}
		if s.ScrubStatus().Passes == 0 && float64(got) < rate*elapsed-float64(2*maxEntry) {
			t.Fatalf("tick %d: only %d bytes read in %.2f s at %d B/s", i, got, elapsed, rate)
		}
		prev = got
	}
	if prev < total {
		t.Fatalf("a pass read %d bytes, the CommitLog holds %d", prev, total)
	}
}

// Off by default: no scrubbing.
func TestScrubberOff(t *testing.T) {
	fx := newCorruptFixture(t, true)
	d := newScrubDriver(&fx.cfg, 0, time.Second)
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	for range 5 {
		d.tick()
	}
	d.barrier()
	if st := s.ScrubStatus(); st.Bytes != 0 || st.Passes != 0 {
		t.Fatalf("scrubbed while off: %+v", st)
	}
}

// The scrubber running on its own ticker alongside writers, segment
// roll-overs and a topic deleted and created again finds nothing in a
// sound store (no false alarm from data in flight) and completes passes.
// Run with -race.
func TestScrubberAlongsideWrites(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	cfg.ScrubBytesPerSecond = 64 << 20
	cfg.ScrubPassInterval = -1
	cfg.IndexMaxEntries = 100 // several index files, all but one sealed
	s := mustOpen(t, cfg)
	defer s.Close()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				topic := fmt.Sprint("T", w%2)
				put(t, s, newMsg(topic, int32(w), fmt.Sprintf("%d-%d-%s", w, i, strings.Repeat("x", 900)), map[string]string{"KEYS": fmt.Sprint("k", i)}))
			}
		}()
	}
	wg.Wait()
	waitVisible(t, s, "T1", 3, 100)
	if err := s.DeleteTopic("T0"); err != nil {
		t.Fatal(err)
	}
	for i := range 50 { // T0 again: its queue offsets start over
		put(t, s, newMsg("T0", 0, fmt.Sprint("again ", i), nil))
	}
	waitVisible(t, s, "T0", 0, 50)
	start := s.ScrubStatus().Passes
	deadline := time.Now().Add(20 * time.Second)
	for s.ScrubStatus().Passes < start+2 {
		if time.Now().After(deadline) {
			t.Fatalf("no two passes after the writes: %+v", s.ScrubStatus())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := s.ScrubStatus(); st.Problems != 0 || len(s.Isolated()) != 0 {
		t.Fatalf("the scrubber reported a sound store: %+v, isolated %v", st, s.Isolated())
	}
}

// A record whose size field is damaged: the scrubber cannot step over it by
// its size, finds the next valid entry, goes on from there (every later
// record is still verified) and isolates it with its queue entry's size.
func TestScrubberResumesAfterDamagedSize(t *testing.T) {
	withVerifyTail(t, fixtureTail) // the damage is where Open does not verify
	fx := newCorruptFixture(t, true)
	victim := fx.msgs[3]
	fx.patch(t, victim.phys, 4, func(b []byte) { b[1] ^= 0x7f })
	d := newScrubDriver(&fx.cfg, 64<<10, time.Second)
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	d.tickUntil(t, 100, func() bool { return s.ScrubStatus().Passes >= 1 })
	st := s.ScrubStatus()
	for _, p := range st.Recent {
		if p.Offset != victim.phys {
			t.Fatalf("problem elsewhere: %v", p)
		}
		if !strings.Contains(p.Msg, fmt.Sprintf("resumes at %d", fx.msgs[4].phys)) {
			t.Fatalf("scrubbing did not resume at the next record (%d): %v", fx.msgs[4].phys, p)
		}
	}
	checkIsolated(t, s.Isolated(), IsolatedRecord{Topic: "T", QueueID: 0, QueueOffset: 3, PhysOffset: victim.phys,
		Size: int32(fx.sizes[3]), FoundBy: FoundByScrub})
	if served := readQueueAll(t, s, fx.msgs); len(served) != len(fx.msgs)-1 {
		t.Fatalf("served %d of %d intact records", len(served), len(fx.msgs)-1)
	}
}

// A segment that cannot be read (EIO) is reported once per pass and
// skipped: the scrubber goes on with the rest of the store.
func TestScrubberReadErrorSkipsTheSegment(t *testing.T) {
	fx := newCorruptFixture(t, true)
	efs := vfs.NewErrorFS(fx.fs)
	fx.cfg.FS = efs
	d := newScrubDriver(&fx.cfg, 64<<10, time.Second)
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	efs.Inject(vfs.Rule{Ops: vfs.OpRead, Path: "/data/commitlog/" + commitlog.SegmentName(0)})
	d.tickUntil(t, 100, func() bool { return s.ScrubStatus().Passes >= 1 })
	st := s.ScrubStatus()
	if len(st.Recent) == 0 {
		t.Fatal("read error not reported")
	}
	for _, p := range st.Recent {
		if p.Offset != 0 || !strings.Contains(p.Msg, "read failed") {
			t.Fatalf("problem %v, want the read error of segment 0", p)
		}
	}
	if st.Problems > st.Passes+1 || len(s.Isolated()) != 0 {
		t.Fatalf("%d problems in %d passes, isolated %v", st.Problems, st.Passes, s.Isolated())
	}
}
