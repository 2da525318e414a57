// Package core is Keel's protocol-free broker: what every front door
// (the RocketMQ remoting adapter in internal/broker, the Kafka door in
// internal/kafka and the AMQP door in internal/amqp) shares on top of the
// message store.
//
// It owns the metadata: topics and their queues (topics.go), consumer
// groups (groups.go) and their committed offsets (offsets.go, with the
// consume rates of consume_tps.go), persisted crash-safely as JSON files
// under <DataDir>/config (persist.go), and the names of system, retry and
// dead-letter topics (names.go). It keeps the registries of online
// clients every front door shares: consumers with their groups and
// subscriptions (consumers.go, subscription.go: filter expressions and the
// store filter they make), producers (producers.go) and orderly consumers'
// queue locks (locks.go); a client is an opaque identity and its front
// door's connection handle. Query and admin look-ups (query.go) and the
// consumer offsets the store's retention asks for (consumed.go) are here
// too.
//
// On a master serving slaves the metadata also travels with the log as
// system records (syslog.go); every core replays them at start from its
// files' snapshot points, and a replica's core applies them as they are
// dispatched (apply.go; delay.go for the schedule cursors;
// replica_offsets.go for offsets committed on a replica).
//
// The core knows no protocol: it returns typed domain errors (errors.go:
// ErrTopicNotFound, ErrForbidden, ... wrapped in *Error with a message for
// the client, tested with errors.Is), and each front door maps them to its
// protocol's codes in one table of its own. It never imports
// internal/remoting or any adapter (internal/archtest enforces this).
//
// Concurrency: every Broker method is safe for concurrent use. Each table
// has its own mutex; a persisted table's saveMu is taken before its mu,
// the offsets' flushMu before their mu, and no code holds two tables'
// locks at once.
package core
