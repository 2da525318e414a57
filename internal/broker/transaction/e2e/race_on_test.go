//go:build race

package e2e

// raceEnabled: the race detector is on. The Go client races internally
// (transactionProducer.Shutdown against its own check-back goroutine's
// InvokeOneWay, reported with no Keel frame), so these tests skip under
// -race; the engine's concurrency is covered by internal/broker/transaction
// and internal/broker/dedup under -race.
const raceEnabled = true
