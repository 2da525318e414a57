// Package store is Keel's message store: the CommitLog (package commitlog)
// holding every record, one ConsumeQueue (package consumequeue) per (topic,
// queueId) locating them, and the key index (package index) for query by
// key and unique ID, tied together with flushing, dispatch, recovery,
// retention and an offline check.
//
// # Directory layout
//
//	<Dir>/lock                         exclusive lock of the running store
//	<Dir>/abort                        present while the store is open (crash marker)
//	<Dir>/checkpoint                   flushed positions (see below), replaced atomically
//	<Dir>/commitlog/<20-digit offset>  CommitLog segments (format in package commitlog)
//	<Dir>/commitlog/flushed            the flushed mark: the log is durable below it (package commitlog)
//	<Dir>/consumequeue/<topic>/<queueId>/<20-digit byte offset>  ConsumeQueue segments
//	<Dir>/index/...                    key index files
//	<Dir>/quarantine/                  bytes recovery removed or a repair replaced, kept for inspection
//	<Dir>/isolated.json                records withheld from consumers (isolate.go), replaced atomically
//	<Dir>/deleted-topics               tombstones of deleted topics (JSON, see tombstone.go), replaced atomically
//	<Dir>/truncate                     a replica's truncation in progress ("keel-truncate 1\n<offset>\n", truncate.go)
//
// Checkpoint (52 bytes, big-endian):
//
//	off size field
//	  0    4 magic "KCKP"
//	  4    4 version = 1
//	  8    8 CommitLog flushed offset
//	 16    8 ConsumeQueue flushed offset: every record below it has its
//	         ConsumeQueue entry on disk
//	 24    8 index flushed offset (same for index entries)
//	 32    8 store timestamp of the last dispatched record (ms)
//	 40    8 time the checkpoint was written (ms)
//	 48    4 CRC32-C of bytes 0..47
//
// It is written to checkpoint.tmp, fdatasync'ed, renamed over checkpoint
// and the directory is synced, by the progress persister every
// FlushConsumeQueueInterval (after flushing the queues, several at once
// when there are many, and the index) and by Close. The persister is a
// goroutine of its own, so its fdatasyncs never hold back dispatch (and
// with it end-to-end latency).
//
// # Write path and acknowledgement
//
// PutMessage(s) encodes the records outside any lock, then queues them;
// whoever holds the append lock takes every queued request and writes them
// with one CommitLog append, assigning dense queue offsets per (topic,
// queueId), the CommitLog offset and the store timestamp (group commit of
// writes; one combined append writes at most 4 MiB). Under SYNC_FLUSH the caller then waits until the flusher's
// fdatasync covers its records (group commit of syncs): PUT_OK means
// durable. Before a flush a waiter asked for, the flusher yields once and
// waits (at most GroupCommitDelay) while other puts are still being encoded
// or appended, so that writers woken by the previous flush share the next
// fdatasync instead of trailing it by one; a lone writer does not wait.
// With a CommitDelay, a flush after one that covered CommitSiblings puts or
// more first waits that long (fewer, larger fdatasyncs under many writers,
// each acknowledgement later by up to the delay).
// FLUSH_DISK_TIMEOUT (after SyncFlushTimeout) and a cancelled
// context mean "written, not known durable": the message may still become
// durable and visible, so producers that retry can create duplicates
// (at-least-once). Under ASYNC_FLUSH, PUT_OK means written to the page cache;
// the flusher syncs every FlushInterval, so a power loss can lose the
// acknowledged messages of about the last FlushInterval (a process crash
// loses nothing: the page cache survives it). A message with the property
// WAIT=false is acknowledged after the write even under SYNC_FLUSH, as in
// RocketMQ.
//
// A failed fdatasync anywhere, or a failed write, flush or checkpoint other
// than the lack of space below, makes the store read-only until restart: it
// is logged at Error, every waiter of the failed sync gets an error (never
// PUT_OK) and every later put gets SERVICE_NOT_AVAILABLE with the cause.
// Reads keep working. A write that would leave less free than the reserve
// (the space above DiskHardLimitRatio, and at least DiskReserveBytes plus
// the prefill window and an index slot table) is refused with DISK_FULL
// wrapping ErrDiskFull, so that dispatch, the checkpoint and the broker's
// metadata still have room; free space is measured when the store's
// estimate is 100 ms old or near the reserve (see space.go). Every write
// is charged, with an allowance for the ConsumeQueue and index entries it
// will cause, against the last measurement: a sample taken on a timer alone
// would let the writer fill the margin between two samples, and dispatch,
// which writes later, would then fail and leave acknowledged messages
// invisible. Replicated ranges are admitted the same way
// (space_replica.go).
//
// Before anything is stored, every put but a system record's asks the put
// gate (SetPutGate, gate.go): a synchronous master's replication service
// installs its in-sync check there, so the broker's own writes (scheduled
// deliveries, retries, transaction records), which pass no front door's
// send check, are refused at once while too few replicas are in sync
// rather than each written and then waiting out the replication timeout.
//
// A write that finds the disk full (ENOSPC or EDQUOT; a failed write, unlike
// a failed fsync, leaves the page cache consistent) does not make the store
// read-only, so writing resumes by itself when space returns:
//   - CommitLog: the batch is not written (the segment is cut back to the
//     written offset, see package commitlog), the queue offsets it took are
//     given back so the queues stay dense, and its puts get DISK_FULL
//     wrapping ErrNoSpace. The next put simply tries again.
//   - ConsumeQueue, index and checkpoint (all derived from the CommitLog):
//     the dispatcher stops at the record it could not dispatch, or the
//     progress is not persisted, and the round is retried on the next write
//     and every FlushConsumeQueueInterval. Readers see what was dispatched;
//     under SYNC_FLUSH puts are still acknowledged while the CommitLog has
//     room. A record re-dispatched after a partial failure is re-appended to
//     its ConsumeQueue idempotently (the index may hold its keys twice;
//     queries deduplicate).
//
// # Record types
//
// Every CommitLog record says what it is in its magic (package record):
// today RocketMQ messages (PutMessage(s); RocketMQ's V1 stored layout, so
// data directories written before types existed are read as they are),
// and records of the enveloped types — a Kafka record batch as received,
// an AMQP message, a system record — put with PutRecord. The generic paths
// (the CommitLog's record check, dispatch, reads, the index, retention,
// Check) ask the record's type (types.go) and never read a type's fields
// themselves; what the RocketMQ type means (WAIT=false acknowledges at
// write, KEYS tokens and UNIQ_KEY go to the index, TAGS to the tag code)
// is rocketmq.go's. An enveloped record gets one ConsumeQueue entry per
// destination, at queue offsets the store assigns under its put lock
// (dense per queue, shared with RocketMQ messages of the queue), or, with
// record.FlagEntryPerMessage, one entry per logical message, all locating
// it, at consecutive queue offsets (a Kafka batch of n records has n;
// records without the flag, written by an earlier release, have one).
// AppendRecordPatched lets the caller patch the first queue offset into
// the body before the CommitLog CRC is computed (the Kafka door's
// baseOffset). Its index keys are
// the ones Config.IndexKeys names (the store does not read its body;
// cmd/keel installs translate.IndexKeys),
// under each destination topic. So one record may be in several queues, and one entry may hold
// several logical messages (see package consumequeue). A record of a type
// this version does not know stops Open, Check, dispatch and reads with an
// error wrapping record.ErrUnknownType that names its magic and offset.
// System records (system.go) have no destinations: the dispatcher checks
// each body (an unknown kind fails the store) and hands it to the one
// SystemFunc subscribed (SubscribeSystem, which first replays those from
// a snapshot point on; it runs on the dispatcher with dispatchMu held and
// must not call the store); LookMessageByOffset never returns one.
// ScanSystem reads them back for a front door that keeps records of its
// own kind, which its SystemFunc passes over (the Kafka door's
// transactions).
//
// # Watermarks
//
// Four named CommitLog offsets say how far records have come; each is the
// exclusive end of the bytes that reached its stage, only moves forward,
// and is defined once (watermarks.go):
//
//	Written     appended to the CommitLog (page cache)       moved by the writer
//	Flushed     durable on the local disk (fdatasync)          the flusher; waiters: the acknowledger
//	Replicated  durable on the replicas the mode requires      = Flushed (no replicas yet), or moved by
//	                                                           a replication service (ExternalReplication)
//	                                                           and the acknowledger after each flush
//	Visible     dispatched: in the ConsumeQueues and index     the dispatcher
//
// Confirmed is not a fifth stage but the one of them the flush mode
// demands: Replicated under SYNC_FLUSH, Written under ASYNC_FLUSH. A put is
// acknowledged when Confirmed passes its records (or at once with
// WAIT=false), and dispatch never passes Confirmed, so under SYNC_FLUSH
// nothing is visible before it is durable (and, with replication, before
// it is replicated): a later truncation never takes back what someone read.
//
// One primitive waits on any of them (package watermark): WaitFor blocks
// with a context and a timeout; Notify calls back instead, costing no
// goroutine, from the goroutine that moves the watermark (the broker's
// deferred send replies, PutMessagesDeferred and PutEachDeferred (a read
// burst's sends in one append, each all or none by itself), and the AMQP front door's
// confirms, PutRecordDeferred and PutRecordsDeferred (the records of a
// read burst in one append, all or none), use it on Confirmed; the
// transaction engine waits on Confirmed for a half message it was asked to
// end). Waiting on Flushed, Replicated or Confirmed asks for a flush. The
// Visible watermark also has per-queue subscribers (OnVisible, any
// number): the dispatcher tells each about every ConsumeQueue entry it
// adds, which is what wakes long polls.
//
// # Dispatch
//
// One dispatcher goroutine, woken by the CommitLog whenever the written or
// flushed offset moves, reads records up to Confirmed, appends their
// ConsumeQueue entries and index entries (by type: for a RocketMQ message
// each KEYS token and the UNIQ_KEY, as "topic#key"; for an enveloped
// record what Config.IndexKeys names), tells the OnVisible
// subscribers, and moves Visible
// (releasing its waiters once per round). Readers only see dispatched
// entries.
//
// # Reads
//
// GetMessage reads ConsumeQueue entries, filters by tag code (and a
// RocketMQ record then by its real tags: the code is a hash), reads the
// records (contiguous records with one read into pooled buffers: a copy
// from the CommitLog's read window when it holds them, a pread otherwise)
// and verifies every one (CRC32-C, structure, and that its topic, queue and
// queue offset are those of the entry) before returning it. A record that
// fails verification is never returned: it is read again around the page
// cache and served if that copy verifies (a read fault); otherwise it is
// isolated (isolate.go: registered, logged at Error once) and skipped, and
// the read goes on with the records after it. (Some filesystems, FUSE
// without page-cache control, return wrong bytes once; the dispatcher too
// reads a failing record again before it makes the store read-only.) A
// record isolated on read is skipped without consulting the registry:
// verification alone decides, so a full disk that cannot record the
// isolation does not block the queue either.
//
// Look-ups by CommitLog offset (send-back, view by id) check the Confirmed
// offset, not Visible: a consumer woken for a record may look it up before
// the dispatcher has moved Visible past it.
//
// # Scrubbing
//
// With ScrubBytesPerSecond > 0 a goroutine re-verifies the store at rest
// at that rate (scrub.go), reporting Problems and isolating corrupt
// CommitLog records. It reads nothing that is not durable and dispatched
// (its limit is min(Flushed, Visible)) and keeps no cold page cached
// (vfs.ReadCold on descriptors of its own, read-ahead off). It reads
// without holding the CommitLog's segMu or the index's mu: a cold read
// takes milliseconds, and under those locks it would hold back a segment
// roll-over or the dispatcher's index Puts. Its own scrub.mu is a leaf.
//
// # Recovery (Open)
//
//  1. Take <Dir>/lock. If <Dir>/abort exists the last run crashed; create it.
//  2. Read the checkpoint (missing or invalid: verify the whole CommitLog).
//  3. Verify the CommitLog to the end from a record at least 32 MiB before
//     the checkpointed flushed offset, located by the ConsumeQueues (opened
//     first, trimmed in step 4) in whichever segment it lies; from the
//     start of the segment holding that target if they locate none closer,
//     or if any entry from there on is invalid (every decision below is
//     then taken as from that segment's start). The
//     durable records before the verified tail are verified when read (and
//     by Check), like those of older segments. A torn tail is cut, after
//     a durable copy of its bytes in <Dir>/quarantine. After a
//     crash, an invalid entry in the last segment at or past the durable
//     offset (the checkpointed flushed offset raised to the CommitLog's
//     flushed mark, which every flush advances: see package commitlog) is
//     also a torn tail even when valid entries follow (unsynced pages
//     written back out of order by a power failure): the bytes after it
//     are copied to <Dir>/quarantine and cut. Below the durable offset the
//     bytes were fdatasynced before the crash, so the same pattern is
//     corruption. Any other corruption in the middle (valid
//     entries follow the invalid one) makes Open fail with an error naming
//     the segment file and offset, leaving the CommitLog unchanged; with
//     RepairCorruption the damaged bytes alone, up to the next valid entry,
//     are copied to <Dir>/quarantine and replaced by a hole record (package
//     commitlog, "Repair"), a message is logged at Error, and the store
//     opens; every record that verifies is kept, the lost ones read as
//     removed. With RepairCorruption the segments holding records of the
//     isolated-records registry before the verified tail are verified and
//     repaired the same way, and the repaired records leave the registry
//     (isolate_repair.go). If the
//     recovered end would lie before the checkpointed flushed offset or
//     the flushed mark, durable data is missing: Open fails unless
//     RepairCorruption is set.
//     A refusing Open changes nothing in the CommitLog: it decides before
//     it cuts, and it removes the abort marker it created. (Opening the
//     ConsumeQueues in step 3 has already cut torn queue entries after a
//     crash: derived data.)
//  4. Drop ConsumeQueue entries pointing at or past the new end; truncate
//     the index the same way.
//  5. Re-dispatch from the checkpointed ConsumeQueue / index offsets (the
//     ConsumeQueues from where verification started after a repair; the
//     index never below the last record it holds) to the end, rebuilding
//     missing entries (re-appending an existing entry is a no-op), then set
//     the queue offset counters from the queues. Queue offsets of records
//     a repair replaced stay: entries already dispatched keep pointing into
//     the hole record; a gap in a queue after the dispatcher skipped a hole
//     is filled with entries pointing at the hole (holes.go). Readers skip
//     both as removed; Check counts them as lost.
//
// A checkpoint may claim more than the recovered log holds (dispatched
// records that a power loss took from an unsynced tail, or a truncation
// cut): Open rewrites it capped at the log end, or a crash before the next
// checkpoint would leave a gap in the queues of the records that later
// reach those offsets again. On a replica, and on a store whose Replicated
// watermark is moved by a replication service, recovery dispatches only
// what the store had shown before (its files say how far); the rest is
// shown once confirmed again, so visible never passes confirmed across a
// restart either.
//
// # Replicas (replica.go, truncate.go, compare.go, fromreplica.go)
//
// A store opened with Config.Replica takes records only through
// AppendReplicated (a master's raw CommitLog ranges, each record verified
// before a byte is written, at exactly the log end). TruncateReplica cuts
// a diverged replica's CommitLog durably: an intent file (<Dir>/truncate)
// first, then the cut, fdatasync and checkpoint, which the next Open
// finishes after a crash; it never cuts below what the replica showed
// (ErrTruncateVisible). TruncateClosed has a closed store's next Open cut
// below that too (a former ASYNC_MASTER's tail no replica got).
// StartReplicaAt starts an empty replica's log at its master's first
// segment. Offline, Compare compares two stopped replicas' committed logs
// (keel check --compare) and RepairFromReplica puts a replica's verified
// bytes in place of a corrupt entry, offsets unchanged, instead of a hole
// record (keel check --repair-from-replica).
//
// # Deleted topics (tombstone.go)
//
// A deleted topic's records stay in the CommitLog until retention, without
// queue entries and under queue offsets a re-created topic reuses. Before
// its queues are destroyed, the deletion writes a durable tombstone: the
// topic and the log's written end (on a synchronous master past what is
// dispatched, so records not yet replicated are covered too). Dispatch,
// recovery's re-dispatch included, skips those records, and Check expects
// no entries for them. On a replica, DeleteReplicatedTopic does the same
// from the SystemFunc for the record that removes the topic (the tombstone
// at that record's end; one already there makes a replay a no-op).
//
// # Retention
//
// At the hours of DeleteWhen, CommitLog segments closed more than
// FileReservedTime ago are deleted, oldest first. While disk use is at or
// above DiskMaxUsedSpaceRatio, the oldest segment is deleted if
// DiskPressureDelete allows it (by default: expired and consumed by every
// consumer group, as SetConsumerOffsets reports: a queue no group has an
// offset for is unconsumed, DLQ and transaction topics too, and the
// schedule engine reports its durable cursors as the pseudo-group
// "(schedule)"), one at a time with the
// disk measured again before each, at most 10 a round (see pressure.go).
// The last segment and anything not yet flushed and dispatched are never
// deleted. Queues that settle messages one at a time (AMQP) hold their
// first unsettled entry through SetQueueHolds: age-based retention keeps
// the segment it points into and every later one (logged at WARN), disk
// pressure counts the hold as a consumer group (holds.go). Age holds
// (SetAgeHolds: a Kafka topic retained longer than FileReservedTime) keep
// segments from age-based retention alike, and disk pressure ignores
// them. ConsumeQueues
// and the index then drop what pointed into the deleted segments, and min
// offsets advance.
//
// # Offline check
//
// Check (used by `keel check`) verifies a store that is not running without
// changing it (component repairs done while opening go to an in-memory
// copy-on-write layer): every CommitLog record (CRC32-C, structure, its
// PHYSICALOFFSET field), every record against its ConsumeQueue entry and
// every entry against its record (topic, queue, offset, size, tag code),
// and every KEYS token and UNIQ_KEY against the index. Missing entries for
// records after the checkpointed offsets and a torn tail are warnings (the
// next Open repairs them); everything else is a problem, listed with its
// kind, file and offset. What repairs left (hole records, queue entries of
// lost records, files in quarantine) is counted, not a problem.
//
// # Concurrency
//
// All exported methods are safe for concurrent use. Goroutines: the
// CommitLog flusher, acknowledger, prefiller and cache trimmer (the last
// two idle unless configured), the dispatcher, the progress persister and
// the retention loop, all joined by Close. Watermark waiters left at
// Close are answered with an error (or nil if reached). Lock order:
// appendMu, progressMu, dispatchMu, qmu (and the CommitLog's internal locks
// last); the free-space estimate's lock (space.mu) is taken under appendMu
// or alone, and nothing is locked under it. The isolated-records registry's
// iso.mu (held across the registry's durable write) is taken before the
// CommitLog's segMu and never under another store lock; the scrubber's
// scrub.mu is a leaf.
package store
