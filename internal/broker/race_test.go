//go:build race

package broker

// raceEnabled: under the race detector sync.Pool drops what it is given
// at random and the runtime allocates for its own bookkeeping, so tests
// counting allocations skip.
const raceEnabled = true
