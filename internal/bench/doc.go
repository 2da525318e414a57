// Package bench is Keel's load generator, the engine of `keel bench`.
//
// It drives a running broker over the RocketMQ remoting protocol with a
// lean client of its own (client.go): route lookup from the NameServer,
// SEND_MESSAGE (V1 header) and SEND_BATCH_MESSAGE (V2 header) with many
// requests in flight per connection, and PULL_MESSAGE with long polling and
// offsets tracked locally. Message bodies carry their send time, so the
// consumers measure end-to-end latency.
//
// A Workload (workload.go, read from a flat YAML file, yaml.go) says what
// to run: topics, queues, message size, producers and their rate, in-flight
// window or sync senders, batch size, consumers, duration, warm-up, and one
// of five modes: produce, consume, produce-consume, backlog (fill then
// drain) and max-rate (raise the rate until the system stops keeping up).
// Run executes it and returns a Result: throughput and latency quantiles
// from a log-linear histogram (hist.go: 1 µs .. 60 s within 1 %).
//
// Concurrency: Run owns every goroutine it starts (one per producer
// connection, which keeps its in-flight window with asynchronous requests
// completed on the connection's reader, or one per sync sender; one per
// consumed queue; one progress loop) and joins them before it returns.
// Counters and histograms are lock-free atomics shared by all of them.
//
// It is a pure client: of Keel's packages it imports only remoting,
// message and diskprobe (its tests start brokers). Around it, outside the
// package: bench/ holds the workloads and bench/run.sh, which writes
// docs/benchmarks.md; bench/official drives the same produce workloads
// through the official Go client (a test package, so that client stays out
// of the binary); bench/peers is a Go module of its own (the peer brokers'
// clients never become Keel's dependencies) whose drivers run one workload
// against Keel's doors and the peer brokers for bench/sections/80-peers.sh.
package bench
