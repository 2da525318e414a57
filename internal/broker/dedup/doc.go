// Package dedup is Keel's producer de-duplication (beyond RocketMQ): a send
// whose client UNIQ_KEY was already stored for the same topic within the
// window (duplicationWindowSeconds, default 120 s; 0 = off) is not stored
// again and is answered with the original result — same offset message ID,
// queue ID and queue offset — so a producer that retries after a lost
// response does not create a second copy.
//
// # Guarantee
//
// For single-message sends that carry a UNIQ_KEY from the client (the Go
// and Java clients set one on every single message): at most one record
// per (topic, UNIQ_KEY) is stored within any window, also across a broker
// restart, as long as the first send was acknowledged (PutOK or
// FLUSH_DISK_TIMEOUT) and its record survived (a send that failed is not
// remembered: its retry is stored). It applies to normal, delayed and
// prepared (transactional) sends: the duplicate gets the first send's
// offsets, so END_TRANSACTION of either answer finds the one half message.
// Batches (SEND_BATCH_MESSAGE) are de-duplicated message by message when
// every item carries a UNIQ_KEY (the Java client's do): duplicates are left
// out of the append and the response lists their original IDs. The Go
// client's batch items carry no UNIQ_KEY, so its batches have nothing to
// de-duplicate. Not covered: sends without a client UNIQ_KEY (the broker's
// own keys are unique); a retry to a different topic.
//
// # How
//
// The broker calls Check before storing. Three sources answer it:
//
//  1. In-flight marker: while one send of a key is being stored, a
//     concurrent send of the same key waits for it and then sees its
//     result, so two duplicates in flight are never both stored.
//  2. The table: (topic#UNIQ_KEY) -> result, open addressed by the key's
//     hash (slots.go), with a ring in insertion order that bounds it to
//     MaxEntries; entries leave from the head when their window has
//     passed, or early (evicted) when the ring is full.
//  3. The store's key index (every UNIQ_KEY is indexed as "topic#key"):
//     the table holds every key this process stored at or after
//     `complete` (the process start; the beginning of time for a master
//     whose store was empty then: Config.StartsEmpty) but those evicted,
//     whose keys a pair of Bloom filters remembers until their window
//     passes (evicted.go). A miss is checked with store.QueryByKey on the
//     topic and on the shadow topics (half and schedule topics, matched by
//     REAL_TOPIC) when the window reaches back before `complete` (the
//     first window after a restart with data) or the filters may hold its
//     key (an evicted key, or a false positive); the oldest record in the
//     window is the original. Only then is a key new.
//
// The window is measured in store timestamps, so Now must be the store's
// clock.
//
// # Cost
//
// Per send with a client UNIQ_KEY: one table look-up and insert under a mutex
// (about 150 bytes per entry; 2^18 entries by default ≈ 40 MB, of which the
// table's slots, 16 bytes each for at least 4/3 MaxEntries, are made with
// the de-duplicator: 8 MiB by default), and once
// the ring has evicted, a filter test (one word read in each of two
// filters, 2 MiB each by default) and a filter insert per eviction. Index
// lookups (one per topic in ShadowTopics + 1, each a hash-slot read and a
// record read per candidate) happen only for misses in the first window
// after a restart with data, and for the retries of evicted keys and the
// filters' false positives (0.5 % of keys with four evicted keys per filter
// word: TestEvictedKeysFalsePositives).
//
// # Concurrency
//
// All methods are safe for concurrent use.
package dedup
