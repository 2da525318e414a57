// Command keel is the Keel message broker: a durable broker with RocketMQ's
// storage and delivery model that speaks RocketMQ's remoting protocol.
//
//	keel serve                 NameServer and broker in one process
//	keel namesrv               the NameServer alone
//	keel broker -n ADDR        the broker alone, registering with ADDR
//	keel check --data-dir DIR  verify a store offline
//	keel version
//
// main only parses flags and wires packages together; each command lives in
// its own file. SIGINT and SIGTERM cancel the command's context, which starts
// a graceful shutdown bounded by shutdownTimeout.
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
