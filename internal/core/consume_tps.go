package core

// Consume rates (RocketMQ's consumeTps): how fast a consumer group's committed
// offsets advance, per topic, over the last minute. Every commit that moves
// a queue's offset forward adds the distance to a ring of one-second
// buckets of its (group, topic); the rate is the sum of the buckets of the
// last tpsWindow seconds divided by that window. A queue's first commit
// (nothing to measure against, for example after a restart) and commits
// that move an offset back (a reset) add nothing.

import (
	"sync"
	"time"
)

const tpsWindow = 60 // seconds

type groupTopic struct{ group, topic string }

type tpsRing struct {
	sec   [tpsWindow]int64 // the Unix second a bucket counts, or 0
	count [tpsWindow]int64
}

type consumeRates struct {
	now func() time.Time

	mu    sync.Mutex
	rings map[groupTopic]*tpsRing
}

func newConsumeRates(now func() time.Time) *consumeRates {
	return &consumeRates{now: now, rings: make(map[groupTopic]*tpsRing)}
}

// add records that group's offsets on topic advanced by n messages.
func (r *consumeRates) add(group, topic string, n int64) {
	if n <= 0 {
		return
	}
	s := r.now().Unix()
	i := int(uint64(s) % tpsWindow)
	r.mu.Lock()
	defer r.mu.Unlock()
	k := groupTopic{group, topic}
	ring := r.rings[k]
	if ring == nil {
		ring = &tpsRing{}
		r.rings[k] = ring
	}
	if ring.sec[i] != s {
		ring.sec[i], ring.count[i] = s, 0
	}
	ring.count[i] += n
}

// rate returns group's messages per second over the last minute on topic,
// or on all its topics when topic is "". Rings with nothing in the window
// are dropped.
func (r *consumeRates) rate(group, topic string) float64 {
	if r == nil {
		return 0
	}
	s := r.now().Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	var sum int64
	for k, ring := range r.rings {
		var n int64
		for i, bs := range ring.sec {
			if bs > s-tpsWindow && bs <= s {
				n += ring.count[i]
			}
		}
		if n == 0 {
			delete(r.rings, k)
			continue
		}
		if k.group == group && (topic == "" || k.topic == topic) {
			sum += n
		}
	}
	return float64(sum) / tpsWindow
}

// forget drops the rates of a deleted group or topic ("" matches any).
func (r *consumeRates) forget(group, topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.rings {
		if (group == "" || k.group == group) && (topic == "" || k.topic == topic) {
			delete(r.rings, k)
		}
	}
}
