// Package kafka is Keel's Kafka front door: a listener speaking the Kafka
// protocol (codecs from franz-go's kmsg) over the protocol-free core
// (internal/core) and its store, a sibling of the RocketMQ adapter
// (internal/broker), which it never imports.
//
// One file per request family: frame.go (framing and limits), server.go
// (listener, connections, the dispatch), apiversions.go (the served keys
// and advertised ranges: one table), metadata.go, produce.go, fetch.go,
// listoffsets.go, coordinator.go, groups.go (the classic group protocol),
// groups_describe.go (DescribeGroups, ListGroups), topics.go
// (CreateTopics, DeleteTopics), admin.go (CreatePartitions, DeleteRecords,
// DescribeCluster, DeleteGroups), configs.go (DescribeConfigs,
// AlterConfigs, IncrementalAlterConfigs: the per-topic configs kept in
// the topic's attributes), offsets.go (OffsetCommit, OffsetFetch, lag in
// records), idempotence.go (InitProducerId, producer sequence windows and
// their expiry), sasl.go (SaslHandshake, SaslAuthenticate: PLAIN, SCRAM)
// and authz.go (per-request checks against Config.ACL); batch.go
// validates record batches, partition.go maps
// Kafka offsets onto ConsumeQueue entries, errors.go is the one table
// from the core's error kinds to Kafka codes.
//
// # Storage and offsets
//
// A Kafka topic is a core topic; its partitions are the topic's queues.
// A produced record batch is stored as one CommitLog record of type
// record.KafkaBatch (package internal/store/record), with one
// destination, so it gets one ConsumeQueue entry:
//
//	CommitLog record  = envelope (TOTALSIZE 4, MAGICCODE 0xDAA34B42 4,
//	                    MESSAGES = recordsCount 4, FLAGS 2, DESTCOUNT=1 2,
//	                    BODYLEN 4, STORETIMESTAMP 8, PHYSICALOFFSET 8,
//	                    dest: TOPICLEN 1, TOPIC, QUEUEID 4, QUEUEOFFSET 8,
//	                    TAGSCODE 8 = 0)
//	                  + body: the RecordBatch v2 as the producer sent it,
//	                    except baseOffset (bytes 0-7: the Kafka offset of
//	                    its first record, assigned here) and
//	                    partitionLeaderEpoch (bytes 12-15: 0); the
//	                    batch's CRC-32C does not cover either, so it is
//	                    stored and served unchanged, compressed batches
//	                    compressed
//	                  + the CommitLog's CRC32-C trailer over the record
//	ConsumeQueue entry (20 bytes: PhysOffset, size, tags code 0): one per
//	                    batch; its index, the queue offset, is NOT the
//	                    Kafka offset
//
// Kafka offsets count records: a batch of n records at base offset b holds
// b..b+n-1 and the next batch of the partition gets b+n. The base offset
// is assigned under the partition's append lock, together with the
// append, so base offsets grow with entry order; the next one is kept in
// memory and, after a restart, read from the last batch in the queue
// (scanning back past entries that are not Kafka batches; a queue with
// none starts at its entry count). Fetch serves the stored bodies as they
// are: no offset is patched on the read path.
//
// From a Kafka offset to an entry: the entry whose batch holds it is found
// by a binary search over the queue's entries, reading each probe's batch
// header (log2(entries) reads), unless a hint says where: every fetch
// remembers the entry after the last batch it served, keyed by the next
// Kafka offset, so a consumer reading on finds its entry at once. The high
// watermark is the end of the last visible batch (visible never passes
// Confirmed: under SYNC_FLUSH nothing unflushed is served); the log start
// is the base of the first batch still stored.
//
// # Entries of other protocols
//
// A queue may hold RocketMQ messages and AMQP messages (a queue declared
// over the topic) besides Kafka batches. Fetch serves such an entry
// converted into a record (package translate; consecutive ones in one
// batch) at a Kafka offset equal to its queue offset, while it comes
// before the partition's first Kafka batch (before both that batch's
// entry and its base offset). This is the mapping above with one record per entry: a
// partition no Kafka producer wrote has Kafka offset = queue offset
// everywhere (high watermark = entry count, log start = the first
// entry), and the first Kafka batch appended to it gets the entry count
// as its base offset, so offsets go on densely. Entries of other
// protocols after the first batch have no Kafka offset between the
// batches' and are skipped. foreign.go finds the first batch by a
// forward scan per partition, extended as entries are added until one is
// found (at once in a partition only Kafka producers wrote), and the last
// (the high watermark) scanning back from the end as before, down to the
// first; ListOffsets by time counts the served entries with their store
// time.
//
//	entries:  [RocketMQ 0][AMQP 1][RocketMQ 2][batch base 3, 4 records][RocketMQ][batch base 7 ...]
//	Kafka:     0           1       2           3 4 5 6                  (skipped)  7 ...
//
// # Limits
//
// A request frame is at most Config.MaxRequestBytes (the broker's
// maxFrameBytes); a batch at most Config.MaxBatchBytes (maxMessageSize).
// A frame that does not parse closes its connection; nothing else is
// harmed. A connection is served one request at a time, in order.
//
// # Concurrency
//
// One goroutine per connection, and one that expires group sessions. The
// groups' state is under Server.gmu; a JoinGroup or SyncGroup waiting for
// its rebalance waits on a channel with gmu released. A partition's appendMu is held across
// the next-offset read and the store's append (AppendRecord), never
// across a flush: acks=-1 waits for Confirmed after it is released. The
// partition's caches have their own mu, taken without appendMu. The
// scan of other protocols' entries (foreign.go) has its own mutex, held
// while it reads the store, taken under appendMu (a partition's first
// produce) or alone, never the other way round.
package kafka
