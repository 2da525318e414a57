package schedule

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
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
	type image struct {
		fs  *vfs.MemFS
		now time.Time
		n   int // messages acknowledged before the image
	}
	var all []sched
	var images []image
	for i := range 30 {
		body := fmt.Sprintf("m-%02d", i)
		level := int32(1 + i%2)
		// WAIT=false, as on the broker's retries, must not weaken the
		// acknowledgement of Schedule.
		m := newMsg("dst", int32(i%2), body, map[string]string{message.PropWaitStoreMsgOK: "false"})
		at := int64(0)
		if i%3 == 0 {
			level, at = 0, e.clk.Now().Add(1500*time.Millisecond).UnixMilli()
		}
		if r := e.svc.Schedule(context.Background(), m, level, at); r.Status != store.PutOK {
			t.Fatal(r.Err)
		}
		if at == 0 {
			at = m.StoreTimestamp + ms(levelDelay(e.levels, level-1))
		}
		all = append(all, sched{body, at})
		if i%4 == 3 {
			images = append(images, image{mem.CrashClone(), e.clk.Now(), len(all)})
		}
		e.waitVisible(m.Topic, m.QueueID, m.QueueOffset+1)
		e.advance(97 * time.Millisecond)
	}
	for range 16 {
		e.advance(113 * time.Millisecond)
		e.settle()
		images = append(images, image{mem.CrashClone(), e.clk.Now(), len(all)})
	}
	e.stop()
	for i, img := range images {
		r := &env{t: t, fs: img.fs, dir: "/data", clk: newFakeClock(img.now), levels: e.levels}
		r.start()
		want := all[:img.n]
		// Deliveries are at-least-once across a crash: count distinct ones.
		got := map[string]int64{}
		r.stepUntil(img.now.Add(time.Minute), func() bool {
			clear(got)
			for q := int32(0); q < 2; q++ {
				for _, m := range r.delivered("dst", q) {
					if at, ok := got[string(m.Body)]; !ok || m.StoreTimestamp < at {
						got[string(m.Body)] = m.StoreTimestamp
					}
				}
			}
			for _, s := range want {
				if _, ok := got[s.body]; !ok {
					return false
				}
			}
			return true
		})
		for _, s := range want {
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
