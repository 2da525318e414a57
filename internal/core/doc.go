// Package core is Keel's protocol-free broker: what every front door
// (the RocketMQ remoting adapter in internal/broker, the Kafka door in
// internal/kafka and the AMQP door in internal/amqp) shares on top of the
// message store.
//
// It owns the metadata: topics and their queues (topics.go), consumer
// groups (groups.go) and their committed offsets (offsets.go, with the
// consume rates of consume_tps.go), persisted crash-safely as JSON files
// under <DataDir>/config (persist.go; Run flushes the offsets every
// OffsetFlushInterval), and the names of system, retry and dead-letter
// topics (names.go). It keeps the registries of online
// clients every front door shares: consumers with their groups and
// subscriptions (consumers.go, subscription.go: filter expressions and the
// store filter they make), producers (producers.go) and orderly consumers'
// queue locks (locks.go); a client is an opaque identity and its front
// door's connection handle. Query and admin look-ups (query.go) and the
// consumer offsets the store's retention asks for (consumed.go) are here
// too.
//
// The produce path is a sequence of steps a front door runs itself (the
// RocketMQ door must, to defer its answer to the group commit; there is no
// one core call for the whole sequence yet): CheckSend, PrepareMessage,
// CheckDuplicate or CheckBatchDuplicates over the Deduplicator hook (one
// de-duplication path for single messages and batches, dedup.go), then
// Route to the Transactions or Scheduler hook (hooks.go), else the door
// puts to the store. SendBack (retry.go) re-puts a failed message to
// %RETRY%<group> or %DLQ%<group>; CheckRead checks a read. Hold and
// WaitForData park a read until new data (longpoll.go): the store's
// dispatch listener (OnVisible) is the core's, wakes them and passes the
// event to the Scheduler; a door stopping on a shared core wakes its own
// waits with WakeOwned. The engines (package broker/schedule, transaction
// and dedup) are installed with SetScheduler, SetTransactions and
// SetDeduplicator and are protocol-free too.
//
// Whatever the broker stores on a client's behalf and then acknowledges
// (send-back copies, scheduled deliveries, dead-letter moves) must not
// carry WAIT=false: RocketMQ sets it there, but under SYNC_FLUSH it would
// acknowledge before the fdatasync.
//
// On a master serving slaves the metadata also travels with the log as
// system records (syslog.go); every core replays them at start from its
// files' snapshot points, and a replica's core applies them as they are
// dispatched (apply.go; delay.go for the schedule cursors;
// replica_offsets.go for offsets committed on a replica). A topic or group
// change is appended and flushed before its JSON file is written (the
// file's keelLogOffset is the record's end); offset commits are coalesced
// into one record per FlushOffsets, which waits until it is Confirmed
// (replicated on a SYNC_MASTER); the schedule cursors are one record per
// write (LogDelayProgress), flushed. The master ignores its own records
// while it serves (its memory is ahead) and applies them at start from
// the files' points; a replica applies them as they are dispatched and
// writes its files at the next FlushOffsets with the point reached. Kinds
// the core does not own go to the Config.Tables that own them (tables.go:
// the AMQP door's Mirror), replayed from their own snapshot points.
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
