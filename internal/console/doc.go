// Package console is Keel's web console: a small single-page application
// (plain HTML, CSS and JavaScript embedded with go:embed, no build step)
// and the JSON API under /api/ it runs on.
//
// The API is backed by internal/admin, the same client the keel CLI uses,
// so the console shows exactly what `keel topic|group|msg|dlq|txn|corrupt|cluster|amqp|kafka` show:
//
//	GET  /api/info                      version, write access, sample interval
//	GET  /api/overview                  brokers, totals, throughput and lag history, local disk
//	GET  /api/topics[?all=1]            topics with queue counts and message counts
//	GET  /api/topics/{topic}            one topic's queues (min/max offsets)
//	GET  /api/topics/{topic}/messages?from=MS[&limit=N]  messages stored from a time on, oldest first
//	POST /api/topics                    create a topic            (write access)
//	GET  /api/groups                    consumer groups with lag, retry and DLQ counts
//	GET  /api/groups/{group}            per-queue lag, members, subscriptions, lag trend
//	GET  /api/messages?id=ID[&topic=T]  a message by id, every stored copy
//	GET  /api/messages?topic=T&key=K[&begin=&end=]  messages by key
//	GET  /api/dlq/{group}               a group's dead letters
//	POST /api/dlq/{group}/resend        {"msgId":ID[,"again":true]} or {"all":true}  (write access;
//	                                    a dead letter resent before: 409 with "again": true)
//	GET  /api/transactions              undecided transactional half messages
//	GET  /api/corrupt                   records isolated as corrupt, scrubber status, per broker
//	GET  /api/replication               broker groups, each member's replication state (keel cluster)
//	GET  /api/elections                 controller mode: each group's election history (time, epoch,
//	                                    old and new master, kind clean/unclean/switch-over)
//	GET  /api/amqp                      AMQP queues, exchanges and connections, per broker
//	GET  /api/kafka                     Kafka consumer groups (members, assignments) and connections, per broker
//	GET  /api/kafka/groups/{group}      a Kafka group as kafka-consumer-groups.sh --describe
//
// An API answer read (in part) from a slave because its group's master
// is missing carries the header X-Keel-Slave-Reads (admin.SlaveRead lines,
// separated by " | "); the pages show it above themselves.
//
// Read-only by default: the POST endpoints answer 403 unless the console was
// started with write access (keel serve --console-write). They also require
// the header X-Keel-Console: 1 and a JSON body, which a cross-site form
// cannot send.
//
// A sampler (Run) records throughput and per-group lag every
// SampleInterval into a bounded in-memory history (an hour) for the charts.
// In controller mode the election history comes through Config.Elections,
// a hook cmd/keel fills from the controllers. The package imports only
// internal/admin of Keel's packages.
package console
