package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// A queue hold (SetQueueHolds) keeps, against age-based retention, every
// segment from the one its first needed entry points into, and says so at
// WARN; disk pressure counts it as a consumer group. A hold that has moved
// past every message holds nothing.
func TestQueueHoldsKeepWhatIsNotSettled(t *testing.T) {
	for _, c := range []struct {
		name     string
		hold     int64 // T/0's hold; -1: no hook
		pressure bool  // 80 % disk use with PressureDeleteConsumed, at 10:00 (not DeleteWhen)
		deletes  bool
	}{
		{"age without a hold deletes", -1, false, true},
		{"age keeps what a hold needs", 5, false, false},
		{"age deletes below a settled hold", 60, false, true},
		{"pressure keeps a queue nobody consumes", -1, true, false},
		{"pressure keeps what a hold needs", 5, true, false},
		{"pressure deletes below a settled hold", 60, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs logBuffer
			clock := newFakeClock()
			mem := vfs.NewMem()
			cfg := testConfig(mem)
			cfg.Now, cfg.Logger = clock.Now, logs.logger()
			cfg.DiskPressureDelete = PressureDeleteConsumed
			s := mustOpen(t, cfg)
			defer s.Close()
			if c.hold >= 0 {
				s.SetQueueHolds(func() QueueHolds { return QueueHolds{"T": {0: c.hold}} })
			}
			var acked []ackedMsg
			for i := range 60 {
				body := fmt.Sprintf("%02d%s", i, strings.Repeat("x", 4000))
				m := newMsg("T", 0, body, nil)
				put(t, s, m)
				acked = append(acked, ackedMsg{"T", 0, m.QueueOffset, m.PhysOffset, []byte(body)})
			}
			flushAll(t, s)
			if c.pressure {
				total, free, _ := mem.DiskUsage("/data")
				mem.SetCapacity((total - free) * 100 / 80)
			} else {
				clock.Set(time.Date(2026, 1, 6, 4, 30, 0, 0, time.Local)) // DeleteWhen "04", days later
			}
			s.runRetentionOnce()
			lo := s.MinOffset("T", 0)
			if got := lo > 0; got != c.deletes {
				t.Fatalf("min offset %d after retention: deleted %v, want %v\n%s", lo, got, c.deletes, logs.String())
			}
			if c.hold >= 0 && c.hold < 60 {
				if lo > c.hold {
					t.Fatalf("min offset %d passed the hold %d", lo, c.hold)
				}
				checkAcked(t, s, acked[c.hold:], "held")
				if !c.pressure && !strings.Contains(logs.String(), "T/0 group=(held) offset=5") {
					t.Fatalf("no warning naming the held queue\n%s", logs.String())
				}
			}
			if strings.Contains(logs.String(), "level=ERROR") {
				t.Fatalf("an error was logged\n%s", logs.String())
			}
		})
	}
}

// An age hold (SetAgeHolds) keeps segments from age-based retention like a
// queue hold, but disk pressure ignores it: a queue consumed by its group
// lets its segments go under pressure whatever its age hold says, where a
// queue hold at the same offset keeps them.
func TestAgeHoldsYieldToDiskPressure(t *testing.T) {
	for _, c := range []struct {
		name     string
		at       int64 // the hold's offset
		age      bool  // the hold is an age hold, else a queue hold
		pressure bool
		deletes  bool
	}{
		{"age retention keeps an age hold", 5, true, false, false},
		{"age retention keeps an age hold at the first record", 0, true, false, false},
		{"pressure ignores an age hold", 5, true, true, true},
		{"pressure keeps a queue hold", 5, false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs logBuffer
			clock := newFakeClock()
			mem := vfs.NewMem()
			cfg := testConfig(mem)
			cfg.Now, cfg.Logger = clock.Now, logs.logger()
			cfg.DiskPressureDelete = PressureDeleteConsumed
			s := mustOpen(t, cfg)
			defer s.Close()
			holds := func() QueueHolds { return QueueHolds{"T": {0: c.at}} }
			if c.age {
				s.SetAgeHolds(holds)
			} else {
				s.SetQueueHolds(holds)
			}
			s.SetConsumerOffsets(func() ConsumerOffsets { return ConsumerOffsets{"T": {"g": {0: 60}}} })
			for i := range 60 {
				put(t, s, newMsg("T", 0, fmt.Sprintf("%02d%s", i, strings.Repeat("x", 4000)), nil))
			}
			flushAll(t, s)
			if c.pressure {
				total, free, _ := mem.DiskUsage("/data")
				mem.SetCapacity((total - free) * 100 / 80)
			} else {
				clock.Set(time.Date(2026, 1, 6, 4, 30, 0, 0, time.Local))
			}
			s.runRetentionOnce()
			lo := s.MinOffset("T", 0)
			if got := lo > c.at; got != c.deletes {
				t.Fatalf("min offset %d after retention: deleted past the hold %v, want %v\n%s", lo, got, c.deletes, logs.String())
			}
			if c.age && !c.pressure && !strings.Contains(logs.String(), fmt.Sprintf("T/0 group=(retention) offset=%d", c.at)) {
				t.Fatalf("no warning naming the held queue\n%s", logs.String())
			}
		})
	}
}
