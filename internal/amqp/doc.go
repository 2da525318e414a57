// Package amqp is Keel's AMQP 0-9-1 front door: RabbitMQ clients (pika,
// amqp091-go, ...) declare durable queues, publish persistent messages
// with publisher confirms and consume them with acknowledgements, on
// Keel's store. It is a sibling of internal/broker (the RocketMQ front
// door) and imports no other front door; the byte layer is package wire,
// generated from the protocol's XML definition.
//
// # What is served
//
// The vhost "/" and Config.Vhosts (amqpVhosts), each its own namespace with its files
// in its own directory (vhostDir); PLAIN and AMQPLAIN against Config.Users (guest/guest
// from loopback only unless a guest account is configured), or with
// aclEnable=true against the accounts of plain_acl.yml, each method checked
// against the account's topic permissions on the queue or exchange name
// (auth.go), and
// connection.update-secret re-checked the same way, and a connection
// whose password reloaded ACL accounts no longer accept closed
// (revoke.go); tune
// (channel-max, frame-max, heartbeats); channels; the default exchange
// and direct, fanout, topic and headers exchanges with bindings, also
// between exchanges (amq.direct, amq.fanout, amq.topic, amq.headers,
// amq.match predeclared; durable ones with their bindings to durable
// queues and exchanges in DataDir/amqp/exchanges.json);
// queues (durable, exclusive, auto-delete, server-named, passive declare,
// 406 on a conflicting redeclare, purge, delete); basic.publish with
// mandatory (basic.return before the confirm); confirm.select;
// basic.consume/cancel/get; basic.ack/nack/reject with multiple and
// requeue; basic.qos prefetch (per consumer; global=true per channel);
// basic.recover; queue arguments (args.go): TTL, dead-lettering, length
// limits in messages and bytes (maxbytes.go) with drop-head,
// reject-publish and reject-publish-dlx, delivery limits, queue types,
// single active consumer; consumer
// priorities (x-priority); connection.blocked while the store's
// disk is full (blocked.go); alternate exchanges; x-expires; the consumer
// timeout (timeout.go); tx.select, tx.commit and tx.rollback (tx.go: a
// commit's messages are one record); message priorities (x-max-priority,
// priority.go: an in-memory ready index per level over the one
// ConsumeQueue, rebuilt from the stored messages at start); the
// x-delivery-count header on redeliveries from quorum queues (queue.go,
// deliveryCountLocked); stream queues (x-queue-type=stream,
// stream.go: read without being consumed, each consumer from its
// x-stream-offset; over an x-keel-topic its offsets are the Kafka
// partition's). docs/amqp.md is the user's list.
//
// connection.close-ok is sent only after the connection's channels are
// released (unacked deliveries requeued, exclusive queues deleted): a
// client that saw close-ok and declares the same exclusive queue again, or
// consumes what it left unacked, finds it so, as RabbitMQ deletes them
// synchronously.
//
// Operators see the door through the broker's LIST_AMQP request (a hook
// cmd/keel installs: keel amqp, the console), metrics.Sources.AMQP and the
// management API (internal/amqpmgmt, over the snapshots of mgmt.go). On a
// controller-mode slave, ServeRefusals (refuse.go) takes the door's place:
// it answers connection.open with 530 naming the master and stores
// nothing.
//
// # Storage
//
// A queue is a store topic with one ConsumeQueue (queue id 0) whose name
// is random (%AMQP%<24 hex>) and kept, for durable queues, in
// DataDir/amqp/queues.json with the declare's arguments (written with
// vfs.WriteFileDurable before declare-ok). A published message is one
// AMQP record (package record's envelope; body laid out in message.go:
// exchange, routing key, the publisher's raw content-header properties,
// body) with one destination per queue it is routed to: a message an
// exchange routes to several queues is stored once and located from
// each queue's ConsumeQueue. The reader lays out the records of the
// publishes of one read burst (the frames already in its buffer; a
// body that came in one frame is laid out from the frame, and the
// publish and ack methods are decoded into the channel's own values,
// hotmethods.go) and stores them (at most 256 publishes or 1 MiB at a time) with one
// Store.PutRecordsDeferred (publishbatch.go: one
// append, in publish order, so one channel's messages are stored in
// publish order) before it reads the socket again or runs any other
// method; a publish refused before the store (unroutable, a full
// reject-publish queue) is answered on its own. Each is confirmed when
// the store answers, which under
// SYNC_FLUSH is once the Confirmed watermark (fdatasync) passed it, and
// after the Visible watermark passed it too (so a method sent after the
// confirm sees the message); then it is delivered, once the confirms the
// same fdatasync allowed went out (conn.pumpAfterAcks): a queue's pump reads
// the messages its consumers have credit for with one store read
// (readahead.go), and the deliveries that the settlements of one read
// burst allow are made once the burst is handled, in one write. Up to
// maxPendingPublishes (1024) publishes per connection await their
// confirm; the reader then waits. The messages of one tx.commit are one
// record of several messages (message.go, tx.go), one destination per
// message and queue, stored before commit-ok: all or none after a crash.
// Over several groups, each group's part is committed on that group, one
// group after the other, before commit-ok: atomic per group only.
//
// A queue declared with the argument x-keel-topic is stored in queue 0
// of that Keel topic instead (topicqueue.go): RocketMQ and Kafka
// producers writing there feed it, their records converted on delivery
// (package translate; each record of a Kafka batch is delivered and
// settled on its own), and what is routed to it is read by RocketMQ and
// Kafka consumers of the topic; deleting the queue keeps the topic.
//
// A stream queue (stream.go) is the same topic queue read as a log: its
// consumers have their own cursors (memory), acks only give prefetch
// credit back, and its floor is its log start, moved by x-max-age and
// x-max-length-bytes; it holds nothing against the store's retention.
//
// # Acknowledgement state
//
// Per queue, over its ConsumeQueue offsets:
//
//	floor      every offset below is settled (acked, rejected, purged)
//	settled    offsets >= floor settled out of order
//	delivered  one past the highest offset ever handed out
//	in flight  (memory) offsets handed out and not settled
//	returned   (memory) requeued offsets, served first, lowest first
//
// Per channel, the deliveries not yet acknowledged are held by value in
// delivery-tag order (unacked.go: no allocation per delivery, an ack
// found by binary search, its entries under twice the deliveries held
// plus 32).
//
// floor, settled and delivered are written to DataDir/amqp/acks.json
// (whole file, vfs.WriteFileDurable) at most every
// Config.AckStateInterval when they changed, and at Close. Before a
// message is handed out beyond a durable queue's lease, the lease
// (DataDir/amqp/lease-<topic>: a bound on delivered) is raised by
// leaseStep (256) with a durable write (in place: one slot of the file and
// its fdatasync, leasefile.go): once half of the lease is used,
// the next is written off the queue's lock (queue.raiseLeaseEarly), so
// deliveries, publishes and acks of the queue do not wait for its fsyncs;
// a delivery that reaches the lease before that write is done waits for
// it. A clean Close trims the lease back to delivered. A restart serves every unsettled offset from floor again;
// one below max(delivered, lease) carries redelivered=true. A settlement
// not yet written when the broker dies is therefore a redelivery, never
// a loss, and the redelivered flag is never missing after a crash (it
// may be set on up to leaseStep messages that were never delivered,
// which "may have been delivered" allows).
// On a master serving slaves (Config.SystemRecords) every change of the
// definitions and of the acknowledgement state is first a system record
// of the CommitLog (replicate.go): a declare, bind or delete is one record
// of the entries it changed, flushed before queues.json or exchanges.json
// is written; the acknowledgement state (every AckStateInterval) and a
// lease change are one record each, Confirmed before acks.json or the
// lease file is written. Every member keeps them in its files through a
// Mirror (the core's table for the AMQP kinds, core.Config.Tables; snapshot
// point DataDir/amqp/logpoint.json), so a slave promoted to master serves
// the queues of its log with their state.
// Every queue holds its settled floor against the store's retention
// (store.SetQueueHolds; retention.go): unsettled messages are not deleted
// by age, and disk pressure treats the floor as a consumer group's
// offset. A queue nobody consumes therefore keeps the log from its floor
// on: the store says so at WARN, and
// keel_amqp_queue_oldest_unsettled_age_seconds shows it; the disk-pressure
// policy decides when the disk fills. Expiry, length and delivery limits and dead-lettering are in
// deadletter.go; a dead-letter copy is stored before its original is
// settled.
//
// # A cluster of broker groups
//
// With Config.Cluster set (docs/amqp.md), the doors find each other
// through the NameServer (amqpAddr, GET_AMQP_CLUSTER,
// cmd/keel/wire_amqp_cluster.go), and queues homed on other groups are
// used through this door (forward.go): their methods are forwarded to the home's door
// over upstream connections opened as the client (forward_client.go, on
// package wire), homes found by asking the other groups (forward_home.go),
// a new name created by the one group its arbiter names (claim.go),
// dead-letter copies for other groups' queues confirmed by their homes
// before the original is settled (deadletter_remote.go),
// deliveries and their settlements relayed (forward_consume.go),
// publishes confirmed once every home confirmed (forward_publish.go), and
// an exchange here may bind another group's queue (forward_bind.go).
//
// # Concurrency
//
// One reader goroutine per connection runs every method of it; the
// server's worker goroutine stores dead-letter copies in order, its
// sweep goroutine expires queue heads and watches the disk; a
// confirmer goroutine per connection runs, in order, what the store's
// acknowledger queues for it (conn.later: confirms and the deliveries of
// new messages; the acknowledger must not block). Queue pumps deliver
// from whichever goroutine made progress possible (a stored publish, ack,
// consume, qos, a closing channel). An upstream connection's reader
// goroutine hands its deliveries to the client under the channel's mu and
// its confirms to the confirmer (conn.later). Lock order:
// vhost.mu, then queue.mu, then channel.mu, then conn.wmu (the socket
// write); a channel's mu is never held while taking a queue's.
package amqp
