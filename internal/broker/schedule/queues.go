package schedule

import (
	"math/bits"
	"slices"
	"strconv"
	"time"

	"github.com/keelmq/keel/internal/message"
)

// Schedule topics.
const (
	// LevelTopic holds delay-level messages, queue level-1.
	LevelTopic = "SCHEDULE_TOPIC_XXXX"
	// TimerTopic holds timer messages, queue k with delay 2^k seconds.
	TimerTopic = "KEEL_SYS_TIMER"
	// TimerQueues is the number of timer queues: 2^17 s (about 36 h) is the
	// largest power of two below the 3-day maximum delay.
	TimerQueues = 18
	// MaxLevels bounds the number of delay levels (and of level queues
	// the service serves).
	MaxLevels = 1000
	// DefaultMaxTimerDelay is RocketMQ's timerMaxDelaySec (3 days).
	DefaultMaxTimerDelay = 72 * time.Hour
)

// timerFinalMs is the remainder below which a timer entry waits for its due
// time itself instead of moving to a lower queue (the delay of queue 0).
const timerFinalMs = 1000

// DefaultDelayLevels returns RocketMQ's messageDelayLevel default
// "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h".
func DefaultDelayLevels() []time.Duration {
	s, m, h := time.Second, time.Minute, time.Hour
	return []time.Duration{s, 5 * s, 10 * s, 30 * s, m, 2 * m, 3 * m, 4 * m, 5 * m, 6 * m, 7 * m, 8 * m, 9 * m,
		10 * m, 20 * m, 30 * m, h, 2 * h}
}

// LevelQueue returns the LevelTopic queue of a delay level with n levels
// configured: level-1, clamped to n-1. ok is false for level <= 0 (no delay)
// or n == 0.
func LevelQueue(level int32, n int) (queueID int32, ok bool) {
	if level <= 0 || n <= 0 {
		return 0, false
	}
	if int(level) > n {
		return int32(n - 1), true
	}
	return level - 1, true
}

// levelDelay is the delay of level queue q; queues beyond the configured
// levels use the largest one.
func levelDelay(levels []time.Duration, q int32) time.Duration {
	if len(levels) == 0 {
		return 0
	}
	if q < 0 {
		q = 0
	}
	if int(q) >= len(levels) {
		return levels[len(levels)-1]
	}
	return levels[q]
}

// TimerQueue returns the timer queue for a remaining delay: the largest k
// with 2^k s <= remaining, 0 below one second, at most TimerQueues-1.
func TimerQueue(remainingMs int64) int32 {
	sec := remainingMs / 1000
	if sec < 1 {
		return 0
	}
	k := int32(bits.Len64(uint64(sec)) - 1)
	return min(k, TimerQueues-1)
}

// TimerQueueDelay is the delay of timer queue k (2^k seconds).
func TimerQueueDelay(k int32) time.Duration {
	k = max(0, min(k, TimerQueues-1))
	return time.Duration(int64(1)<<k) * time.Second
}

// timerActionMs is when the service acts on a timer entry of queue k stored
// at storeMs and due at dueMs: the queue's delay has passed (capped at the
// due time), or the due time itself when less than timerFinalMs would be
// left then.
func timerActionMs(k int32, storeMs, dueMs int64) int64 {
	f := min(storeMs+TimerQueueDelay(k).Milliseconds(), dueMs)
	if dueMs-f < timerFinalMs {
		return dueMs
	}
	return f
}

// timerDue reads TIMER_OUT_MS; ok is false when it is missing or malformed.
func timerDue(props []byte) (int64, bool) {
	v, ok := message.Property(props, message.PropTimerOutMs)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// actionMs is when the service acts on entry v of a schedule queue.
// Timer entries without a usable TIMER_OUT_MS act at once.
func actionMs(levels []time.Duration, topic string, queueID int32, v message.View) int64 {
	if topic == LevelTopic {
		return v.StoreTimestamp() + levelDelay(levels, queueID).Milliseconds()
	}
	due, ok := timerDue(v.Properties())
	if !ok {
		return v.StoreTimestamp()
	}
	return timerActionMs(queueID, v.StoreTimestamp(), due)
}

// TagsCode is the ConsumeQueue tag code of a schedule-topic record: the time
// (Unix ms) the service acts on it, with levels the configured
// messageDelayLevel. ok is false for every other topic; the caller then uses
// the usual tag hash. Only for records that passed message.Check.
func TagsCode(v message.View, levels []time.Duration) (code int64, ok bool) {
	switch string(v.Topic()) {
	case LevelTopic:
		return actionMs(levels, LevelTopic, v.QueueID(), v), true
	case TimerTopic:
		return actionMs(levels, TimerTopic, v.QueueID(), v), true
	}
	return 0, false
}

// StoreTagsCode returns a hook for store.Config.TagsCode: TagsCode for the
// schedule topics, the hash of TAGS (the record's TAGS property, tags) for
// every other.
func StoreTagsCode(levels []time.Duration) func(v message.View, tags []byte) int64 {
	levels = slices.Clone(levels)
	return func(v message.View, tags []byte) int64 {
		if code, ok := TagsCode(v, levels); ok {
			return code
		}
		return message.TagsCodeBytes(tags)
	}
}

// IsScheduleTopic reports whether topic is one of the schedule topics.
func IsScheduleTopic(topic string) bool { return topic == LevelTopic || topic == TimerTopic }
