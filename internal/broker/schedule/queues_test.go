package schedule

import (
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
)

func TestLevelQueue(t *testing.T) {
	for _, tc := range []struct {
		level int32
		n     int
		want  int32
		ok    bool
	}{
		{-1, 18, 0, false}, {0, 18, 0, false}, {1, 18, 0, true}, {3, 18, 2, true}, {18, 18, 17, true},
		{19, 18, 17, true}, {1000, 18, 17, true}, {5, 2, 1, true}, {1, 0, 0, false},
	} {
		got, ok := LevelQueue(tc.level, tc.n)
		if got != tc.want || ok != tc.ok {
			t.Errorf("LevelQueue(%d, %d) = %d, %v; want %d, %v", tc.level, tc.n, got, ok, tc.want, tc.ok)
		}
	}
}

func TestLevelDelay(t *testing.T) {
	lv := DefaultDelayLevels()
	if len(lv) != 18 || lv[0] != time.Second || lv[2] != 10*time.Second || lv[17] != 2*time.Hour {
		t.Fatalf("default levels %v", lv)
	}
	if d := levelDelay(lv, 40); d != 2*time.Hour {
		t.Errorf("queue beyond the levels: %v, want the largest delay", d)
	}
	if d := levelDelay(lv, 4); d != time.Minute {
		t.Errorf("queue 4: %v", d)
	}
}

func TestTimerQueue(t *testing.T) {
	for _, tc := range []struct {
		ms   int64
		want int32
	}{
		{-5, 0}, {0, 0}, {1, 0}, {999, 0}, {1000, 0}, {1999, 0}, {2000, 1}, {3999, 1}, {4000, 2},
		{10_500, 3}, {65_536_000, 16}, {131_071_999, 16}, {131_072_000, 17},
		{(72 * time.Hour).Milliseconds(), 17}, {1 << 50, 17},
	} {
		if got := TimerQueue(tc.ms); got != tc.want {
			t.Errorf("TimerQueue(%d) = %d, want %d", tc.ms, got, tc.want)
		}
	}
	if TimerQueueDelay(0) != time.Second || TimerQueueDelay(17) != 131072*time.Second {
		t.Errorf("queue delays %v %v", TimerQueueDelay(0), TimerQueueDelay(17))
	}
	if TimerQueueDelay(TimerQueues-1)*2 < DefaultMaxTimerDelay {
		t.Errorf("the timer queues cannot reach the maximum delay")
	}
}

func TestTimerActionMs(t *testing.T) {
	for _, tc := range []struct {
		k          int32
		store, due int64
		want       int64
		name       string
	}{
		{3, 0, 10_500, 8000, "queue delay passes first"},
		{1, 8000, 10_500, 10_500, "hop leaving 500ms: the due time"}, {1, 8000, 11_500, 10_000, "next hop"},
		{0, 10_000, 10_500, 10_500, "remainder below a second: the due time"},
		{3, 0, 8_900, 8_900, "would leave 900ms: act at the due time"},
		{3, 5, 8000, 8000, "store timestamp after the decision: capped at due"},
		{2, 100, 50, 50, "already due"},
		{0, 0, 1000, 1000, "exactly one second"},
	} {
		if got := timerActionMs(tc.k, tc.store, tc.due); got != tc.want {
			t.Errorf("%s: timerActionMs(%d, %d, %d) = %d, want %d", tc.name, tc.k, tc.store, tc.due, got, tc.want)
		}
	}
}

// cascade simulates the service on one timer: each entry is stored skewMs
// after the time the service decided to put it; the action time of the
// last entry is the delivery time. It returns the delivery time and the
// number of puts before delivery.
func simulateCascade(delayMs, skewMs int64) (deliverMs int64, puts int) {
	due := delayMs
	now := int64(0)
	k := TimerQueue(due - now)
	store := now + skewMs
	puts = 1
	for {
		at := timerActionMs(k, store, due)
		now = max(now, at)
		if now >= due || due-now < timerFinalMs {
			return max(now, due), puts
		}
		k = TimerQueue(due - now)
		store = now + skewMs
		puts++
		if puts > 64 {
			panic("cascade does not converge")
		}
	}
}

func TestCascadeExactAndBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	delays := []int64{1, 999, 1000, 1001, 1999, 2000, 3500, 10_500, 59_999, 60_000, 65_535_999,
		(72 * time.Hour).Milliseconds(), (72 * time.Hour).Milliseconds() - 1}
	for range 2000 {
		delays = append(delays, rng.Int64N((72*time.Hour).Milliseconds())+1)
	}
	for _, d := range delays {
		at, puts := simulateCascade(d, 0)
		if at != d {
			t.Fatalf("delay %d ms: delivered at %d", d, at)
		}
		if want := max(1, bits.OnesCount64(uint64(d/1000))); puts > want {
			t.Fatalf("delay %d ms: %d puts, more than popcount %d", d, puts, want)
		}
		// A store timestamp a few ms late never makes delivery early or
		// more than that late, and the number of hops stays within the bit
		// length.
		at, puts = simulateCascade(d, 3)
		if at < d || at > d+3*int64(TimerQueues) {
			t.Fatalf("delay %d ms with skew: delivered at %d", d, at)
		}
		if puts > max(1, bits.Len64(uint64(d/1000))) {
			t.Fatalf("delay %d ms with skew: %d puts", d, puts)
		}
	}
}

func testRecord(t *testing.T, topic string, queueID int32, storeMs int64, props string) message.View {
	t.Helper()
	m := &message.Message{Topic: topic, QueueID: queueID, BornHost: netip.MustParseAddrPort("127.0.0.1:1"),
		StoreHost: netip.MustParseAddrPort("127.0.0.1:2"), Body: []byte("x"), Properties: props, StoreTimestamp: storeMs}
	rec, err := m.AppendStored(nil)
	if err != nil {
		t.Fatal(err)
	}
	message.PatchStored(rec, 0, 0, storeMs)
	if err := message.Check(rec); err != nil {
		t.Fatal(err)
	}
	return message.View(rec)
}

func TestTagsCode(t *testing.T) {
	lv := DefaultDelayLevels()
	v := testRecord(t, LevelTopic, 2, 1_000_000, "")
	if c, ok := TagsCode(v, lv); !ok || c != 1_010_000 {
		t.Errorf("level queue 2: %d %v", c, ok)
	}
	props := message.SetProperty("", message.PropTimerOutMs, strconv.FormatInt(1_000_000+10_500, 10))
	v = testRecord(t, TimerTopic, 3, 1_000_000, props)
	if c, ok := TagsCode(v, lv); !ok || c != 1_008_000 {
		t.Errorf("timer queue 3: %d %v", c, ok)
	}
	v = testRecord(t, TimerTopic, 3, 1_000_000, "")
	if c, ok := TagsCode(v, lv); !ok || c != 1_000_000 {
		t.Errorf("timer without TIMER_OUT_MS acts at once: %d %v", c, ok)
	}
	v = testRecord(t, "orders", 3, 1_000_000, message.SetProperty("", message.PropTags, "a"))
	if _, ok := TagsCode(v, lv); ok {
		t.Errorf("ordinary topic recognised")
	}
}
