package controller

import (
	"time"
)

// Clock is the leader's time source for liveness and detection: the wall
// clock in production, a manual one in tests. (raft's own timers use the
// real clock; only the controller's decisions are driven by Clock.)
type Clock interface {
	Now() time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
