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
// Metadata (topics, subscription groups, consumer offsets), the registries
// of online producers and consumers with their subscriptions, and the queue
// locks are the core's; see internal/core. The adapter names a client to
// the core by its clientID and its *remoting.Conn.
//
// Concurrency: the remoting server calls Handle on one goroutine per request;
// every broker method is safe for concurrent use. The adapter holds no lock
// of its own around the core's registries; network sends to clients
// (NOTIFY_CONSUMER_IDS_CHANGED, deferred pull responses) happen outside
// every lock.
package broker
