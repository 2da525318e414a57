//go:build race

package amqp

// raceEnabled: under the race detector sync.Pool drops what it is given
// at random, so tests measuring pooled allocations skip that part.
const raceEnabled = true
