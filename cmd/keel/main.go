// Command keel is the Keel message broker: a durable broker with RocketMQ's
// storage and delivery model that speaks RocketMQ's remoting protocol, with
// Kafka and AMQP 0-9-1 front doors on the same store.
//
//	keel serve                 NameServer and broker in one process
//	keel namesrv               the NameServer alone (a controller voter too,
//	                           with --controller-listen)
//	keel broker -n ADDR        the broker alone, registering with ADDR
//	keel controller            a controller voter; status, switch-over and
//	                           allow-unclean over the controller's client
//	keel check --data-dir DIR  verify a store offline (--compare and
//	                           --repair-from-replica over two replicas)
//	keel bench                 the load generator (internal/bench)
//	keel topic|group|msg|dlq|txn|corrupt|cluster|amqp|kafka
//	                           admin commands over internal/admin
//	keel version
//
// main only parses flags and broker.conf and wires packages together; each
// command lives in its own file, and no broker logic lives here. A flag
// overrides broker.conf only when it is given on the command line (its
// default never masks a value from the file). The config is converted into
// each package's own Config, and the wire*.go files are the only ones that
// know the packages' constructors: wire_broker.go builds, on the store
// opened before it, the one core.Broker every front door is given (broker.NewOnCore,
// kafka.New; the AMQP door takes the store), a service of its own whose
// stop, after every front door stopped, wakes what is still held and
// flushes the offsets. listen.go binds every listener of a command before
// any service starts, so a busy address fails the start at once, naming
// the flag that changes it; lifecycle.go then starts services in order and
// stops them in reverse within shutdownTimeout on SIGINT/SIGTERM or when
// one fails. http.go is the HTTP listener (metrics, /healthz, /readyz, the
// console).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
