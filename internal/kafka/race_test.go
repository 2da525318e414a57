//go:build race

package kafka

// raceEnabled: the race detector changes what allocations cost, so tests
// measuring them skip under it.
const raceEnabled = true
