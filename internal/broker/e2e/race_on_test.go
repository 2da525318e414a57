//go:build race

package e2e

// raceEnabled: the race detector is on. The Go client races internally in
// its orderly process queue and its pull consumer (rocketmq-client-go's own
// code, reported with no Keel frame), so those tests skip under -race; the
// broker's concurrency is covered by internal/broker's tests under -race.
const raceEnabled = true
