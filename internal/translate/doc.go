// Package translate converts stored records between the front doors'
// formats on the read path: a RocketMQ consumer reading a Kafka batch or
// an AMQP message, a Kafka consumer reading RocketMQ or AMQP messages,
// an AMQP consumer reading RocketMQ messages or Kafka batches. Nothing is
// converted on the write path: every record is stored as its producer
// sent it (package internal/store/record), and a consumer of the same
// protocol reads it without re-encoding. The one exception is Kafka's own:
// a message set of magic 0 or 1 (Produce v0-v2) is upgraded to a record
// batch when produced (UpgradeMessageSet), as Kafka brokers do. The front doors call it only
// for records of another type.
//
// Every format maps onto one namespace, RocketMQ's properties, which are
// also the Kafka header names; docs/cross-protocol.md has the tables.
//
//	Kafka record           RocketMQ message            AMQP message
//	key (text)             KEYS                        message-id (up to 255 bytes)
//	key (binary)           KAFKA_KEY_BASE64            -
//	value                  body                        body
//	header h               property h                  headers table entry h (long string)
//	timestamp              born timestamp (ms)         timestamp (s)
//	-                      store timestamp             -
//	offset                 KAFKA_OFFSET                -
//	header CONTENT_TYPE    CONTENT_TYPE                content-type
//	header CORRELATION_ID  CORRELATION_ID              correlation-id
//	header AMQP_*          AMQP_REPLY_TO, ...          reply-to, expiration, type, user-id,
//	                                                   app-id, cluster-id, priority, delivery-mode
//	-                      AMQP_EXCHANGE, AMQP_ROUTING_KEY (from AMQP; the routing key is
//	                       the delivery's routing key back in AMQP)
//
// A RocketMQ message converted from another format has the topic and
// queue it is read from, the queue offset of its own entry (a Kafka batch
// has one per record; the records of a batch of an earlier release, one
// entry, share it), the record's CommitLog offset as
// its physical offset, the broker as store host and a deterministic
// UNIQ_KEY (the record's offset, the message's index in it, the type, the
// broker group's tag: message.ConvertedID). A
// header that cannot be a property — a name or value with RocketMQ's
// separator bytes or invalid UTF-8, a null value, a name the broker or
// client acts on (UNIQ_KEY, KEYS, DELAY, RETRY_TOPIC, ...) — is left out.
// A look-up (by key, by message id, by CommitLog offset) answers such
// records converted the same way (AppendRocketMQFound); IndexKeys names
// the index keys of Kafka batches and AMQP messages, which the store
// indexes at dispatch (docs/cross-protocol.md, "Finding messages").
// A Kafka record converted from another format is uncompressed, in a
// batch this package writes (magic 2, CRC-32C, CreateTime, no producer
// id); a RocketMQ body compressed by its producer is inflated.
//
// # Limits
//
// Every decoder here takes a limit: a compressed Kafka batch or RocketMQ
// body inflating beyond it, or a conversion producing more, is refused
// with ErrTooLarge before the memory is taken (snappy's announced length
// is checked before decoding; the stream codecs read through a bound;
// zstd frames asking for a window above 8 MiB are refused). Input that
// does not parse gets an error wrapping ErrMalformed. No function panics
// on any input (fuzz targets cover each decoder).
//
// # Concurrency
//
// Every function is safe for concurrent use; none keeps its input.
package translate
