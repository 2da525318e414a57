package console

import (
	"context"
	"sync"
	"time"
)

// Sample is one point of the console's history.
type Sample struct {
	Time     time.Time        `json:"time"`
	Messages int64            `json:"messages"` // every message ever stored in ordinary topics
	Bytes    int64            `json:"bytes"`    // CommitLog bytes written, summed over brokers
	Lag      map[string]int64 `json:"lag"`      // total lag per consumer group
}

// Rate is a throughput point derived from two samples.
type Rate struct {
	Time           time.Time `json:"time"`
	MessagesPerSec float64   `json:"messagesPerSec"`
	BytesPerSec    float64   `json:"bytesPerSec"`
}

// history is a bounded ring of samples.
type history struct {
	mu      sync.Mutex
	max     int
	samples []Sample // oldest first; guarded by mu
}

func (h *history) add(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) == h.max {
		copy(h.samples, h.samples[1:])
		h.samples = h.samples[:h.max-1]
	}
	h.samples = append(h.samples, s)
}

func (h *history) all() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sample(nil), h.samples...)
}

// rates derives throughput between consecutive samples (never negative:
// a topic deleted between samples is not a negative rate).
func rates(ss []Sample) []Rate {
	out := []Rate{}
	for i := 1; i < len(ss); i++ {
		dt := ss[i].Time.Sub(ss[i-1].Time).Seconds()
		if dt <= 0 {
			continue
		}
		out = append(out, Rate{Time: ss[i].Time,
			MessagesPerSec: max(float64(ss[i].Messages-ss[i-1].Messages), 0) / dt,
			BytesPerSec:    max(float64(ss[i].Bytes-ss[i-1].Bytes), 0) / dt})
	}
	return out
}

// LagPoint is one point of a group's lag trend.
type LagPoint struct {
	Time time.Time `json:"time"`
	Lag  int64     `json:"lag"`
}

func lagTrend(ss []Sample, group string) []LagPoint {
	out := []LagPoint{}
	for _, s := range ss {
		if v, ok := s.Lag[group]; ok {
			out = append(out, LagPoint{Time: s.Time, Lag: v})
		}
	}
	return out
}

// Run samples the cluster every SampleInterval until ctx ends. Failed
// samples are logged and skipped.
func (c *Console) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.SampleInterval)
	defer t.Stop()
	for {
		c.SampleOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// SampleOnce records one history sample now.
func (c *Console) SampleOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.SampleInterval)
	defer cancel()
	s := Sample{Time: c.cfg.Now(), Lag: map[string]int64{}}
	topics, err := c.cfg.Admin.Topics(ctx, false, true)
	if err != nil {
		c.log.Debug("console sample: topics", "err", err)
		return
	}
	for _, t := range topics {
		if t.Kind == "normal" && t.Written > 0 {
			s.Messages += t.Written
		}
	}
	if rt, err := c.cfg.Admin.Runtime(ctx); err == nil {
		for _, b := range rt {
			s.Bytes += atoi(b.Info["commitLogMaxOffset"])
		}
	}
	groups, err := c.cfg.Admin.Groups(ctx, false)
	if err != nil {
		c.log.Debug("console sample: groups", "err", err)
		return
	}
	for _, g := range groups {
		s.Lag[g.Name] = g.Lag
	}
	c.hist.add(s)
}
