package main

import (
	"context"
	"fmt"

	"github.com/keelmq/keel/internal/broker/schedule"
	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/message"
)

// scheduleTagsCode is the store's tag-code hook: the action time for the
// schedule topics (SCHEDULE_TOPIC_XXXX, KEEL_SYS_TIMER), the TAGS hash for
// every other topic. cfg was validated, so messageDelayLevel parses.
func scheduleTagsCode(cfg *config.Broker) func(v message.View, tags []byte) int64 {
	levels, err := cfg.DelayLevels()
	if err != nil {
		return nil // the store's default (TAGS hash); the service reads due times from the records
	}
	return schedule.StoreTagsCode(levels)
}

// scheduleStarter starts scheduled delivery (delay levels, TIMER_* and the
// retry back-off) on the open store and installs it in the core; it must
// come after the broker's starters. Its stop runs first on shutdown: the
// cursors are saved, and messages scheduled by requests still in flight are
// stored and delivered after the next start.
func (p *parts) scheduleStarter() starter {
	return func() (service, error) {
		levels, err := p.cfg.DelayLevels()
		if err != nil {
			return service{}, err
		}
		if p.store == nil || p.core == nil {
			return service{}, fmt.Errorf("schedule: the store and the core must start first")
		}
		svc, err := schedule.New(schedule.Config{
			Dir: p.cfg.StorePathRootDir, DelayLevels: levels,
			Logger: p.log.With("component", "schedule"), OnCursors: p.core.LogDelayProgress,
		}, p.store)
		if err != nil {
			return service{}, err
		}
		p.core.SetScheduler(svc)
		return service{
			name: "schedule",
			run:  svc.Run,
			stop: func(context.Context) error { return svc.Close() },
		}, nil
	}
}
