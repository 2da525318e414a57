// Package admin is the operator's client of a Keel (or RocketMQ) cluster:
// topics, consumer groups and their lag, messages, dead letters, and the
// replication state of broker groups (replication.go, read from each
// broker's runtime info). It
// talks to the cluster only over the remoting protocol — routes and broker
// addresses from the NameServers, then admin requests to the brokers — so
// the keel CLI (cmd/keel) and the web console (internal/console) share one
// implementation and see exactly what a remote operator sees.
//
// Requests use RocketMQ's request codes and body shapes (GET_ALL_TOPIC_CONFIG,
// GET_TOPIC_STATS_INFO, GET_CONSUME_STATS, GET_CONSUMER_CONNECTION_LIST, ...),
// including fastjson's object-keyed maps (mqtable.go).
//
// Reading a queue (msg tail, dlq list) pulls with the tools group
// ToolsGroup and an explicit "*" subscription, without committing offsets,
// as RocketMQ's mqadmin does. Resending dead letters keeps a cursor per DLQ
// queue as the consumer offset of ResendGroup (KEEL_DLQ_RESEND) and a record
// of each single resend in the system topic ResentLogTopic
// (KEEL_SYS_DLQ_RESENT) on the DLQ's broker
// (dlq_resent.go), so a dead letter is resent once unless forced.
//
// Reads go to each broker group's master, or to its slave when the master
// is missing (ReadBrokers; Config.OnSlaveRead tells the tools, which say
// so); writes need the master (Masters).
//
// A wrong -n address is named for what answered there (a broker, an HTTP
// server, a Kafka or AMQP listener: probe.go). Of Keel's packages it
// imports only remoting, message, acl, pendingtxn, amqpinfo and kafkainfo.
//
// A Client is safe for concurrent use. It keeps one connection per address
// and dials again when a connection has closed.
package admin
