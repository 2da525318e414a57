package metrics

// The per-second gauges of rocketmq-exporter's names (compat.go) are
// RocketMQ's per-minute statistics, which the exporter reads from the
// broker (GET_BROKER_STATS_DATA, StatsItem's minute snapshot): every
// statsTick the broker samples each counter, keeps the last statsSamples
// samples (a minute), and the rate is the increase from the first kept
// sample to the last over the time between them. A counter seen for the
// first time gets a zero sample one tick before its first (RocketMQ
// creates its statistics item at zero, at the counter's first event), so
// a new topic's first burst shows at the next tick. Keel samples the same
// way, on a clock of its own (Run), so what a scrape shows does not depend
// on when scrapes come: 20 messages sent to a new topic read 2/s after the
// next tick, then 1, 0.67, 0.5, 0.4, 0.33 as the minute fills, and 0 once
// the burst is out of the minute, as RocketMQ reports them.

import (
	"context"
	"sync"
	"time"
)

// statsTick is the sampling interval; statsSamples the samples kept (the
// first is the baseline: the rate spans six ticks, a minute).
const (
	statsTick    = 10 * time.Second
	statsSamples = 7
)

// Keys of the sampled counters.
const (
	rateBrokerPut  = "put"
	rateBrokerGet  = "get"
	rateTopicPut   = "put/"
	rateTopicBytes = "bytes/"
)

func consumedKey(group, topic string) string { return "consumed/" + group + "\x00" + topic }

// storedResult selects the send results whose messages were stored.
func storedResult(result string) bool { return result == "SUCCESS" }

type minuteSamples struct {
	at   []time.Time
	v    []float64
	seen uint64 // the sampling round that last saw the counter
}

// statsMinute holds the samples of every rate counter.
type statsMinute struct {
	mu    sync.Mutex
	round uint64
	m     map[string]*minuteSamples
}

// add records counter key's value v at now; fromZero says the counter
// started at zero when it was first seen (an in-memory count), so its
// first sample gets a zero baseline one tick before. Counters that persist
// across restarts (committed offsets) start at their first sample.
func (s *statsMinute) add(now time.Time, key string, v float64, fromZero bool) {
	w := s.m[key]
	if w == nil {
		w = &minuteSamples{}
		s.m[key] = w
		if fromZero {
			w.at, w.v = append(w.at, now.Add(-statsTick)), append(w.v, 0)
		}
	}
	w.seen = s.round
	w.at, w.v = append(w.at, now), append(w.v, v)
	if n := len(w.at); n > statsSamples {
		w.at, w.v = w.at[n-statsSamples:], w.v[n-statsSamples:]
	}
}

// rate is the per-second increase of key over its kept samples (0 with
// fewer than two, or after the counter went down).
func (s *statsMinute) rate(key string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.m[key]
	if w == nil || len(w.at) < 2 {
		return 0
	}
	n := len(w.at) - 1
	dt := w.at[n].Sub(w.at[0]).Seconds()
	if dt <= 0 || w.v[n] < w.v[0] {
		return 0
	}
	return (w.v[n] - w.v[0]) / dt
}

// SampleRates takes one sample of every counter the RocketMQ-compatible
// rates are computed from (Run calls it every 10 s; tests call it on
// their own clock).
func (m *Metrics) SampleRates(now time.Time) {
	b := m.cfg.Broker
	if b == nil {
		return
	}
	puts := counterValues(m.sendMessages, storedResult)
	bytes := counterValues(m.sendBytes, nil)
	consumed := map[string]float64{}
	for _, g := range b.GroupNames() {
		if toolGroups[g] {
			continue
		}
		for _, p := range b.ConsumeProgress(g, "") {
			consumed[consumedKey(g, p.Topic)] += float64(p.ConsumerOffset)
		}
	}
	st := b.Store().Stats()
	s := &m.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*minuteSamples{}
	}
	s.round++
	s.add(now, rateBrokerPut, float64(st.PutMessages), true)
	s.add(now, rateBrokerGet, float64(st.GetMessages), true)
	for t, v := range puts {
		s.add(now, rateTopicPut+t, v, true)
	}
	for t, v := range bytes {
		s.add(now, rateTopicBytes+t, v, true)
	}
	for k, v := range consumed {
		s.add(now, k, v, false)
	}
	for k, w := range s.m {
		if w.seen != s.round {
			delete(s.m, k) // deleted topics and groups
		}
	}
}

// Run samples the rates every 10 s until ctx ends; without
// Config.RocketMQNames it returns at once (nothing shows them).
func (m *Metrics) Run(ctx context.Context) {
	if !m.cfg.RocketMQNames || m.cfg.Broker == nil {
		return
	}
	t := time.NewTicker(statsTick)
	defer t.Stop()
	m.SampleRates(m.now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.SampleRates(m.now())
		}
	}
}
