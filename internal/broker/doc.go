// Package broker is Keel's RocketMQ broker: the request processors that sit
// between the remoting protocol (internal/remoting) and the message store
// (internal/store).
//
// One file per request family, each opening with its behaviour and limits:
//
//	broker.go     Config, New/Run/Close, the dispatch table (code -> handler)
//	send.go       SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320)
//	pull.go       PULL_MESSAGE (11); longpoll.go holds pulls until data arrives
//	clients.go    HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, CHECK_CLIENT_CONFIG
//	offsets.go    consumer offsets and offset lookups (14, 15, 29, 30, 31, 32)
//	locks.go      LOCK_BATCH_MQ / UNLOCK_BATCH_MQ for orderly consumers
//	query.go      QUERY_MESSAGE, VIEW_MESSAGE_BY_ID
//	sendback.go   CONSUMER_SEND_MSG_BACK (retry and dead-letter topics)
//	admin.go      topic create/delete, subscription groups, runtime info
//	topics.go     topic table; groups.go subscription groups; persist.go files
//	register.go   NameServer registration
//	hooks.go      Scheduler and Transactions extension points
//
// Metadata (topics, subscription groups, consumer offsets) lives in JSON files
// under <DataDir>/config, each replaced atomically (temp file, fsync, rename,
// fsync dir). Topic and group changes are on disk before they are used;
// consumer offsets are flushed every OffsetFlushInterval and on Close.
//
// Concurrency: the remoting server calls Handle on one goroutine per request;
// every broker method is safe for concurrent use. Each registry (topics,
// groups, offsets, consumers, producers, locks, held pulls) has its own
// mutex and no code holds two of them at once, except configTable's saveMu
// which is always taken before its mu. Network sends to clients
// (NOTIFY_CONSUMER_IDS_CHANGED, deferred pull responses) happen outside every
// lock. The store's dispatch listener only touches the held-pull registry.
package broker
