// Package kafka is Keel's Kafka front door: a listener speaking the Kafka
// protocol (codecs from franz-go's kmsg) over the protocol-free core
// (internal/core) and its store, a sibling of the RocketMQ adapter
// (internal/broker), which it never imports.
//
// One file per request family: frame.go (framing and limits), server.go
// (listener, connections, the dispatch), apiversions.go (the served keys
// and advertised ranges: one table), cluster.go (the cluster as Kafka
// clients see it: brokers, the partition layout over broker groups,
// leaders; partition to local queue), metadata.go, produce.go, fetch.go,
// listoffsets.go, coordinator.go (FindCoordinator and the one
// coordinator of each group in the cluster, coordinatorFor), groups.go
// (the classic group protocol), spread.go (topics spread over the
// cluster's groups by CreateTopics and CreatePartitions), follower.go
// (a slave's consumer-only door, the preferred read replica), epochs.go
// (leader epochs of batches, OffsetForLeaderEpoch),
// groups_describe.go (DescribeGroups, ListGroups), group848.go (consumer
// groups of KIP-848: ConsumerGroupHeartbeat, epochs, reconciliation),
// group848_assign.go (the uniform and range assignors),
// group848_describe.go (ConsumerGroupDescribe), group848_offsets.go
// (their commits' epoch checks, OffsetFetch v8+, OffsetCommit and
// OffsetFetch v10 by topic id), topics.go
// (CreateTopics, DeleteTopics), admin.go (CreatePartitions, DeleteRecords,
// DescribeCluster, DeleteGroups), replicas.go (ElectLeaders and the
// reassignment APIs: a partition's replicas are its group's members, its
// leader the group's master),
// offsetsview.go (why __consumer_offsets is not a topic), configs.go (DescribeConfigs,
// AlterConfigs, IncrementalAlterConfigs: the per-topic configs kept in
// the topic's attributes in the core's topics.json), retention.go (retention.ms and
// retention.bytes: a background task moving partitions' log starts, and
// the store's age holds for topics kept longer than fileReservedTime),
// compact.go (cleanup.policy=compact: the cleaner, and reads of a
// partition's compacted copy below its cleaned point), compactfile.go
// (the copy's file format and its crash-safe replacement),
// compactclean.go (cleaning one record batch),
// offsets.go (OffsetCommit, OffsetFetch: an offset lives with its
// partition's group, other groups' reached through Config.Peers),
// idempotence.go (InitProducerId, producer sequence windows and
// their expiry), txn.go (the transaction coordinator: InitProducerId with
// a transactional id, AddPartitionsToTxn, AddOffsetsToTxn,
// TxnOffsetCommit, EndTxn, timeouts), txnlog.go (its state as system
// records of the CommitLog and its snapshot), txnmarker.go (the commit
// and abort markers, the last stable offset and the aborted transactions
// of a read_committed Fetch), txnauthz.go (their access checks), sasl.go (SaslHandshake, SaslAuthenticate: PLAIN, SCRAM)
// and authz.go (per-request checks against Config.ACL), acls.go
// (DescribeAcls, CreateAcls, DeleteAcls over plain_acl.yml's accounts,
// Config.ACL as a RuleEditor), scram.go (DescribeUserScramCredentials,
// AlterUserScramCredentials over the same accounts), quotas.go
// (DescribeClientQuotas, AlterClientQuotas, and the byte-rate meters
// that throttle Produce and Fetch); batch.go
// validates record batches, partition.go reads the Kafka view of
// ConsumeQueue entries, oldformat.go finds partitions holding batches of
// an earlier release, errors.go is the one table from the core's error
// kinds to Kafka codes.
//
// # Storage and offsets
//
// A Kafka topic is a core topic; its partitions are the topic's queues.
// A produced record batch of n records is stored as one CommitLog record
// of type record.KafkaBatch (package internal/store/record), with one
// destination and record.FlagEntryPerMessage, so it gets n ConsumeQueue
// entries, all locating it:
//
//	CommitLog record  = envelope (TOTALSIZE 4, MAGICCODE 0xDAA34B42 4,
//	                    MESSAGES = recordsCount 4, FLAGS = 1 2,
//	                    DESTCOUNT = 1 2, BODYLEN 4, STORETIMESTAMP 8,
//	                    PHYSICALOFFSET 8, dest: TOPICLEN 1, TOPIC,
//	                    QUEUEID 4, QUEUEOFFSET 8 = the first of its n
//	                    entries, TAGSCODE 8 = 0)
//	                  + body: the RecordBatch v2 as the producer sent it,
//	                    except baseOffset (bytes 0-7: QUEUEOFFSET) and
//	                    partitionLeaderEpoch (bytes 12-15: the leader's
//	                    epoch, 0 when unknown: epochs.go); the
//	                    batch's CRC-32C does not cover either, so it is
//	                    stored and served unchanged, compressed batches
//	                    compressed; a topic's compression.type codec
//	                    (recompressed) and LogAppendTime (attributes
//	                    and maxTimestamp) change it before it is stored,
//	                    with the CRC recomputed
//	                  + the CommitLog's CRC32-C trailer over the record
//	ConsumeQueue entries (20 bytes each: PhysOffset, size, tags code 0):
//	                    n, at queue offsets QUEUEOFFSET..QUEUEOFFSET+n-1,
//	                    all pointing at the record; entry QUEUEOFFSET+i
//	                    stands for record i of the batch
//
// A Kafka offset is the queue offset. The store assigns a batch's n queue
// offsets under its put lock, like any queue offset (dense per queue,
// shared with RocketMQ and AMQP messages), and the door writes the first
// into the batch's baseOffset through store.AppendRecordPatched's hook,
// before the record's CRC is computed; no offset is kept by the door. So:
// the high watermark is the visible entry count (visible never passes
// Confirmed: under SYNC_FLUSH nothing unflushed is served), the log start
// is the queue's first entry or the later one DeleteRecords or the
// topic's retention set (either may leave it inside a batch), a committed Kafka offset is the queue offset the core
// stores, lag is counted in records, and after retention has removed
// every record of a partition its offsets go on from its end (the
// ConsumeQueue keeps it). Fetch at offset o reads entry o and serves its
// batch whole (clients skip the records below o), and goes on at the
// entry after the batch's last (the other entries of a batch locate the
// same record). A compacted partition (cleanup.policy=compact, compact.go)
// is read from its compacted copy below its cleaned point, batches with
// gaps at their original offsets, and its log start is the copy's.
// ListOffsets by time takes the first entry the store's
// search by time gives whose store time is at or after it.
//
// Produce validates a batch (batch.go) and appends it with
// store.AppendRecordPatched under the partition's appendMu, which
// serializes the idempotence check with the append. For acks=-1 it then
// waits for Confirmed and for Visible: the answer tells the client the
// batch is below the high watermark, so a fetch of the offset it was told
// must find it, and Visible follows Confirmed. Fetch serves the stored
// bodies without re-encoding, parked through core.Hold when nothing is
// new (one wait per partition, sharing one wake-up); it does not call core.CheckRead, which wants a consumer group a
// Kafka fetch does not name. Promises: nothing past the visible watermark
// is served; a committed offset is stored as it is and acknowledged after
// the offsets are durable (core.FlushOffsets); an idempotent producer's
// retried batch is never stored twice (its window is rebuilt from the
// stored batch headers after a restart; its state expires and is bounded
// per partition). In a cluster of groups, a commit for a partition of
// another group is forwarded to that group's master through Config.Peers
// (KEEL_KAFKA_GROUP_OFFSETS), and CreateTopics and CreatePartitions ask the
// other masters for their shares the same way (KEEL_KAFKA_TOPIC).
//
// # Compacted topics
//
// The CommitLog is never rewritten. The cleaner (compact.go) writes each
// compacted partition's surviving batches below a cleaned point into a
// copy of its own under <DataDir>/kafka-compacted (original offsets,
// batches rewritten per record; temporary file, fdatasync, rename,
// directory sync: compactfile.go), Fetch reads the copy below the cleaned
// point and the store above it, and the partition holds the CommitLog from
// its cleaned point (an age hold). The cleaner copies only durable records
// (below Flushed): under ASYNC_FLUSH a power loss takes the unflushed tail
// and the store gives its queue offsets to other records, which a copy
// holding the lost ones would shadow. For the same reason a deleted
// topic's copies stop being served at the deletion (the core's
// OnTopicsChanged, also on a slave), before a topic of the same name can
// be made again, and a copy ahead of its partition's entry count, or whose
// first entry locates another record than it began at (the topic made
// again while the broker was down), is not served. A broker whose door is
// off (a slave) runs a Cleaner (compactcleaner.go, wired by cmd/keel) to
// keep copies of its own from the same records, which its door opens after
// a failover.
//
// # Entries of other protocols
//
// A queue may hold RocketMQ messages and AMQP messages (a queue declared
// over the topic) besides Kafka batches: each is one entry, served to
// Kafka consumers converted into a record (package translate; consecutive
// ones in one batch) at its queue offset.
//
//	entries:  [RocketMQ 0][AMQP 1][batch of 3: 2 3 4][RocketMQ 5][batch of 2: 6 7]
//	Kafka:     0           1       2 3 4              5           6 7
//
// # Batches of an earlier release
//
// The first release with this door stored a batch with one entry (no
// FlagEntryPerMessage), its Kafka offsets counted apart from the queue
// offsets. A partition holding one is refused to Kafka clients
// (KAFKA_STORAGE_ERROR with the reason; oldformat.go), found at its first
// Kafka request by reading its entries up to the first Kafka batch; the
// store, RocketMQ and AMQP consumers read it as before (docs/kafka.md,
// "Upgrading").
//
// # Transactions
//
// A transactional batch is stored like any batch, in its partition at
// once; the coordinator's EndTxn then writes a control batch (a marker:
// one record, one entry, one offset) into each partition of the
// transaction. The last stable offset is the first offset an open
// transaction may have written (the high watermark when it added the
// partition); a read_committed Fetch serves below it and names the
// aborted transactions of the range, which clients drop. The
// coordinator's state lives in system records (record.KindKafkaTxn)
// that the core passes over and the door replays at Serve from its
// snapshot's point (store.ScanSystem).
//
//	entries:  [batch pid 7: 0 1][RocketMQ 2][batch pid 7: 3][commit pid 7: 4]
//	          LSO 0 while pid 7's transaction is open, 5 after its marker
//
// # Limits
//
// A request frame is at most Config.MaxRequestBytes (the broker's
// maxFrameBytes), maxUnauthenticatedRequestBytes before SASL
// authentication, read into memory as its bytes come; a batch at most Config.MaxBatchBytes (maxMessageSize).
// A frame that does not parse closes its connection; nothing else is
// harmed. A connection is served one request at a time, in order. Every
// body is walked before kmsg decodes it (bound.go): one whose decoding
// would allocate more than maxDecodeFactor times its size plus
// maxDecodeSlackBytes, or that holds more than maxRequestElements array
// elements, closes its connection. With Config.Budget a frame's bytes are
// claimed before it is read, its decoded size before it is decoded, and
// both are held until it is answered (but for Fetch, JoinGroup and
// SyncGroup, whose waits end by other connections' requests: they give
// the claim back before they are handled).
//
// # What cmd/keel gives it
//
// Access control reaches the door as the Accounts interface (and
// RuleEditor, to read and rewrite the accounts' rules), which cmd/keel
// implements over internal/acl (plain_acl.yml), so the door imports no
// security package. Client quotas are kept in
// <DataDir>/config/kafkaQuotas.json. Of Keel's packages it imports only
// core, store (with its sub-packages), message, translate, doorstats,
// kafkainfo, netlimit and vfs; of franz-go only kmsg (its client, kgo, is
// for tests and examples).
//
// # Concurrency
//
// One goroutine per connection, one that expires group sessions, one
// that applies topics' retention (retention.go; it alone uses a
// partition's size cache, and writes log starts under topicMu), and one
// that cleans compacted topics (compact.go: one pass at a time under
// compactor.passMu; a copy is read under its partition's RWMutex, which a
// pass takes exclusively only to swap in the new copy; lock order passMu,
// compactor.mu, a partition's mu; the core's OnTopicsChanged hook takes
// compactor.mu and then, released, partitions' mu). The
// groups' state, classic and KIP-848, is under Server.gmu (the expiry
// goroutine serves both; a ConsumerGroupHeartbeat never waits); a JoinGroup or SyncGroup waiting for
// its rebalance waits on a channel with gmu released. A partition's
// appendMu is held across the idempotence check and the store's append
// (AppendRecordPatched), never across a flush: acks=-1 waits for
// Confirmed after it is released. The old-format check (oldformat.go) has
// its own mutex, held while it reads the store, taken alone; so have the
// client quotas (quotas.go: wmu serialises changes and their file
// writes, mu guards the quotas and meters), and a throttled connection
// sleeps with none held. The transaction coordinator (txn.go) holds a
// transactional id's mutex across a request on it, markers' appends
// included (each under its partition's appendMu), and its maps' mutex
// only briefly, never across a store wait; Produce takes that mutex
// under appendMu to judge a transactional batch. One goroutine aborts
// the transactions past their timeout (parked while none is open), one
// writes the snapshot (parked while nothing changes).
package kafka
