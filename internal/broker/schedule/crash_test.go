package schedule

import (
	"fmt"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// TestPowerLossNeverLosesScheduled takes power-loss images of the
// filesystem while scheduled messages are being delivered, and checks that
// on every image each acknowledged scheduled message is still delivered
// (at least once) and never before it is due.
func TestPowerLossNeverLosesScheduled(t *testing.T) {
	mem := vfs.NewMem()
	e := &env{t: t, fs: mem, dir: "/data", clk: newFakeClock(t0), levels: []time.Duration{time.Second, 2 * time.Second}}
	e.start()
	t.Cleanup(e.stop)
	// Schedule must survive power loss once acknowledged (SYNC_FLUSH).
	type sched struct {
		body string
		due  int64
	}
	var all []sched
	for i := range 30 {
		body := fmt.Sprintf("m-%02d", i)
		level := int32(1 + i%2)
		m := newMsg("dst", int32(i%2), body, nil)
		if i%3 == 0 {
			at := e.clk.Now().Add(1500 * time.Millisecond).UnixMilli()
			e.schedule(m, 0, at)
			all = append(all, sched{body, at})
		} else {
			e.schedule(m, level, 0)
			all = append(all, sched{body, m.StoreTimestamp + ms(levelDelay(e.levels, level-1))})
		}
		e.advance(97 * time.Millisecond)
	}
	var images []*vfs.MemFS
	var imageTimes []time.Time
	for range 16 {
		e.advance(113 * time.Millisecond)
		e.settle()
		images = append(images, mem.CrashClone())
		imageTimes = append(imageTimes, e.clk.Now())
	}
	e.stop()
	for i, img := range images {
		r := &env{t: t, fs: img, dir: "/data", clk: newFakeClock(imageTimes[i]), levels: e.levels}
		r.start()
		r.stepUntil(imageTimes[i].Add(time.Minute), func() bool {
			return r.st.MaxOffset("dst", 0)+r.st.MaxOffset("dst", 1) >= int64(len(all))
		})
		got := map[string]int64{}
		for q := int32(0); q < 2; q++ {
			for _, m := range r.delivered("dst", q) {
				got[string(m.Body)] = m.StoreTimestamp
			}
		}
		for _, s := range all {
			at, ok := got[s.body]
			if !ok {
				t.Fatalf("image %d: %s lost", i, s.body)
			}
			if at < s.due {
				t.Fatalf("image %d: %s delivered %dms early", i, s.body, s.due-at)
			}
		}
		r.stop()
	}
}
