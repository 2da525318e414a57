// Package clientsuites runs the integration suites that client projects
// ship, pointed at a real `keel serve`, as part of `go test ./...`:
// franz-go's pkg/kgo tests (scripts/kafka-suite.sh) and amqp091-go's
// integration tests (scripts/amqp-suite.sh). Each script copies the
// client's module, at the version go.mod requires, out of the module cache,
// starts Keel on loopback ports chosen at run time and runs the suite; the
// tests it skips, and why, are listed in docs/kafka.md and docs/amqp.md.
//
// The package has no code of its own: the tests are the point.
package clientsuites
