// Package broker is Keel's RocketMQ front door: the remoting request
// processors (internal/remoting) over the protocol-free core
// (internal/core). A handler decodes its request, calls the core, encodes
// the answer; the core's errors become response codes in one table
// (errors.go). Two paths use the message store (internal/store) directly,
// for speed: the pull (pull.go: GetMessage's pooled buffers go to the
// connection without a copy) and the send's put (send.go: a SYNC_FLUSH
// answer is deferred to the group commit, PutMessagesDeferred; the sends
// of one read burst are put with one call, sendburst.go).
//
// One file per request family, each opening with its behaviour and limits:
//
//	broker.go            Config, New/NewOnCore/Run/Close, the dispatch table (code -> handler)
//	core.go              the core the broker serves, and the broker's API over it
//	errors.go            core error kinds and store statuses -> response codes
//	send.go              SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320)
//	sendburst.go         the single-message sends of one read burst, put with one store call
//	pull.go              PULL_MESSAGE (11); longpoll.go holds pulls until data arrives
//	clients.go           HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, CHECK_CLIENT_CONFIG
//	subscription.go      the pull path's name for the core's subscriptions
//	consumer_offsets.go  consumer offsets and offset lookups (14, 15, 29, 30, 31, 32)
//	locks.go             LOCK_BATCH_MQ / UNLOCK_BATCH_MQ for orderly consumers
//	query.go             QUERY_MESSAGE, VIEW_MESSAGE_BY_ID
//	sendback.go          CONSUMER_SEND_MSG_BACK (retry and dead-letter topics)
//	transactions.go      END_TRANSACTION, Keel's ReqListTransactions
//	admin.go             topic create/delete, subscription groups, runtime info
//	register.go          NameServer registration
//
// Besides: slaveread.go decides the pull response's suggestWhichBrokerId
// (slaveReadEnable); longpoll.go layers RocketMQ's suspend and resume
// (suspend timeouts, re-running the pull, writing the answer) on the
// core's waits; pull_types.go converts the records of other types a pull
// meets (below); admin_amqp.go and the Kafka hooks (KafkaHooks) serve the
// other doors' reports (LIST_AMQP, LIST_KAFKA, a Kafka group's members in
// GET_CONSUMER_CONNECTION_LIST) through hooks cmd/keel installs.
//
// Metadata (topics, subscription groups, consumer offsets), the registries
// of online producers and consumers with their subscriptions, and the queue
// locks are the core's; see internal/core. The adapter names a client to
// the core by its clientID and its *remoting.Conn: heartbeats,
// UNREGISTER_CLIENT and LOCK/UNLOCK_BATCH_MQ decode into the core's
// registries, and the adapter sends NOTIFY_CONSUMER_IDS_CHANGED to whom
// the core names. The client-expiry scan (ChannelExpiredTimeout) runs in
// Run, which sends the notifications. What only RocketMQ has stays here:
// NameServer registration (over the wire, not through package namesrv)
// and the admin requests' bodies. NewOnCore serves a core its caller owns
// (cmd/keel builds one for every front door); New makes one of its own
// (tests, the test cluster). The caller owns the store and the remoting
// server and closes them after the broker.
//
// The engines the core drives through its hooks live beside the adapter,
// not in it, and import no broker code: package schedule (delay levels and
// delivery times), package transaction (half messages, decisions,
// check-back; it asks producers through its Producers hook and lists
// through core.TransactionLister, and the adapter speaks the protocol) and
// package dedup (a resend of a stored UNIQ_KEY answered with the original
// result), installed with the core's SetScheduler, SetTransactions and
// SetDeduplicator.
//
// # Pulls of other record types
//
// A RocketMQ pull that meets a record of another type in its queue must not
// send its bytes: the client would take them for a message and fail the
// whole pull. pull_types.go converts such records (package translate) and
// drops those that do not convert. Converted messages are not the store's
// buffers, so they count against MaxPullBytes themselves (a compressed
// Kafka batch inflates far beyond its stored size). Each record of a Kafka
// batch has its own entry, and a pull converts only the records its
// entries designate, each with its entry's queue offset (a client keeps
// one message per offset). Only a batch of an earlier release (one entry,
// its records sharing its offset) is refused to a consumer holding the
// queue's orderly lock.
//
// # Sends
//
// The frame buffers of send requests (SEND_MESSAGE, _V2, SEND_BATCH_MESSAGE)
// are reused as soon as the handler returns (remoting.BodyBorrower):
// nothing reachable from the send path (store, scheduler, transaction and
// dedup hooks, observers) may keep a message's Body, or the message, after
// returning. Tests poison released buffers (remoting.PoisonReleasedFrames,
// or -tags keelpoison), so a kept body shows up as corrupt stored bytes. A
// single-message send of up to 64 KiB runs on its connection's reader
// (RunsInline), so that connection reads nothing else until it returns:
// nothing on that path may wait for anything the same connection's reader
// delivers, nor long for anything else (under SYNC_FLUSH it appends and
// defers its response; a duplicate check waits at most for the original's
// group commit).
//
// The advertised address (brokerIP1 and the port) is the store host of
// every message and so part of every offset message ID: changing it
// changes the IDs of new messages only.
//
// Concurrency: the remoting server calls Handle on one goroutine per request;
// every broker method is safe for concurrent use. The adapter holds no lock
// of its own around the core's registries; network sends to clients
// (NOTIFY_CONSUMER_IDS_CHANGED, deferred pull responses) happen outside
// every lock.
package broker
