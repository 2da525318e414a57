package core

import (
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/message"
)

// Every timer property's name starts with timerPropPrefix, the substring
// timerDeliverMs looks for before it reads any of them.
func TestTimerPropertiesSharePrefix(t *testing.T) {
	for _, k := range []string{message.PropTimerDeliverMs, message.PropTimerDelaySec, message.PropTimerDelayMs} {
		if !strings.HasPrefix(k, timerPropPrefix) {
			t.Errorf("%s does not start with %q", k, timerPropPrefix)
		}
	}
}

func TestTimerDeliverMs(t *testing.T) {
	const now = 1_000_000
	props := func(kv ...string) string {
		m := map[string]string{message.PropUniqKey: "7F0000010D2A18B4AAC2", message.PropKeys: "k1"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return message.EncodeProperties(m)
	}
	for _, c := range []struct {
		props string
		at    int64
		ok    bool
	}{
		{props(), 0, false},
		{props("TIMER_OTHER", "5"), 0, false},
		{props(message.PropTimerDeliverMs, "1500000"), 1_500_000, true},
		{props(message.PropTimerDelaySec, "3"), now + 3000, true},
		{props(message.PropTimerDelayMs, "250"), now + 250, true},
	} {
		at, ok, err := timerDeliverMs(c.props, now)
		if err != nil || at != c.at || ok != c.ok {
			t.Errorf("%q: %d %v %v, want %d %v", c.props, at, ok, err, c.at, c.ok)
		}
	}
	if _, _, err := timerDeliverMs(props(message.PropTimerDelayMs, "x"), now); err == nil {
		t.Error("an illegal TIMER_DELAY_MS was taken")
	}
}

// BenchmarkTimerDeliverMsNone is the check of a message without timer
// properties (nearly every message sent).
func BenchmarkTimerDeliverMsNone(b *testing.B) {
	props := message.EncodeProperties(map[string]string{message.PropUniqKey: "7F0000010D2A18B4AAC2017A2C5B0000",
		message.PropKeys: "order-1", message.PropTags: "TagA", message.PropWaitStoreMsgOK: "true"})
	for b.Loop() {
		if _, ok, _ := timerDeliverMs(props, 0); ok {
			b.Fatal("timer found")
		}
	}
}
