// Package broker is Keel's RocketMQ front door: the remoting request
// processors (internal/remoting) over the protocol-free core
// (internal/core) and the message store (internal/store). A handler decodes
// its request, calls the core, encodes the answer; the core's errors become
// response codes in one table (errors.go).
//
// One file per request family, each opening with its behaviour and limits:
//
//	broker.go            Config, New/Run/Close, the dispatch table (code -> handler)
//	core.go              the core the broker serves, and the broker's API over it
//	errors.go            core error kinds and store statuses -> response codes
//	send.go              SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320)
//	pull.go              PULL_MESSAGE (11); longpoll.go holds pulls until data arrives
//	clients.go           HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, CHECK_CLIENT_CONFIG
//	consumer_offsets.go  consumer offsets and offset lookups (14, 15, 29, 30, 31, 32)
//	locks.go             LOCK_BATCH_MQ / UNLOCK_BATCH_MQ for orderly consumers
//	query.go             QUERY_MESSAGE, VIEW_MESSAGE_BY_ID
//	sendback.go          CONSUMER_SEND_MSG_BACK (retry and dead-letter topics)
//	transactions.go      END_TRANSACTION, Keel's ReqListTransactions
//	admin.go             topic create/delete, subscription groups, runtime info
//	register.go          NameServer registration
//
// Metadata (topics, subscription groups, consumer offsets) is the core's;
// see internal/core.
//
// Concurrency: the remoting server calls Handle on one goroutine per request;
// every broker method is safe for concurrent use. Each registry (consumers,
// producers, locks) has its own mutex and no code holds two of them at
// once. Network sends to clients (NOTIFY_CONSUMER_IDS_CHANGED, deferred pull
// responses) happen outside every lock.
package broker
