// Package consumequeue implements the ConsumeQueue of one (topic, queueId):
// a dense array of fixed-size entries, one per message of the queue, that
// locate the messages in the CommitLog. Queue offset N is the N-th entry.
//
// # On-disk format
//
// A queue is a directory <root>/consumequeue/<topic>/<queueId> of segment
// files, each holding EntriesPerSegment entries. A segment is named by the
// byte offset of its first entry in the whole queue (first queue offset *
// 20), as 20 decimal digits, as RocketMQ does:
//
//	00000000000000000000   entries 0 .. E-1
//	00000000000006000000   entries E .. 2E-1      (E = 300,000)
//
// Files are not preallocated; a segment grows by appends. An entry is 20
// bytes, big-endian:
//
//	+-------------------+-------------+------------------+
//	| physOffset int64  | size int32  | tagsCode int64   |
//	|     8 bytes       |   4 bytes   |     8 bytes      |
//	+-------------------+-------------+------------------+
//
// physOffset is the CommitLog offset of the record's first byte, size its
// TOTALSIZE (without the CRC trailer), tagsCode the hash of its tags used to
// filter without reading the record (for a record of an enveloped type, the
// tag code its destination names). A valid entry has size > 0 and
// physOffset >= 0. The entry {0, MaxInt32, 0} is a filler: a queue started
// at an offset inside a segment (rebuilt from a CommitLog whose head was
// deleted) fills the slots before its first entry with it; fillers are
// never returned.
//
// Two invariants tie entries to records of any type (package record):
//   - One entry locates one record, and several consecutive entries may
//     locate the same one: a record holding n logical messages for the
//     queue (a Kafka record batch of n records stored as received, with
//     record.FlagEntryPerMessage) has n entries there, one per message, at
//     consecutive queue offsets. A record of an earlier release without
//     the flag has one entry standing for all its messages. A reader that
//     walks entries serves such a record once and goes on after its last
//     entry.
//   - One record may be located by entries of several queues (an AMQP
//     message routed to several queues is stored once): entries of
//     different queues may hold the same physOffset; within one queue
//     physOffsets never decrease.
//
// # Recovery
//
// Only a prefix of the appended entries may be durable after a crash, and a
// real disk may persist pages out of order. Open scans the last two segments
// (and any segment that is not full) and stops at the first invalid entry: a
// torn partial entry, an all-zero entry or garbage after it are cut
// durably, and segments after an incomplete one are removed. A missing
// segment between two others (or files that do not match
// EntriesPerSegment) fail Open with ErrCorrupt rather than silently
// dropping entries. The store then
// re-dispatches the CommitLog from the queue's end and calls TruncatePhys
// for entries that point past the recovered CommitLog. Entries are not
// required to grow in physOffset.
//
// MinOffset is not persisted: after Open it is the first stored entry that
// is not a filler. Retention (DeleteBeforePhys) removes whole segments and
// moves MinOffset inside the first remaining one; the store calls it again
// during recovery with the CommitLog's min offset, which derives the same
// MinOffset. The newest segment is never removed by retention, so that
// MaxOffset survives a restart even when every entry is retired.
//
// # Concurrency
//
// One goroutine appends (the dispatcher); Get, MinOffset, MaxOffset,
// LastPhysEnd and SearchOffset may run concurrently with it and with Flush,
// which syncs without blocking appends. TruncatePhys, DeleteBeforePhys,
// Close and Destroy exclude everything else. Append keeps the newest
// TailCacheEntries in memory, so Get serves fresh messages without a system
// call; older entries are read with pread.
//
// # Write-behind
//
// Append collects entries in memory and hands WriteBehindEntries of them
// (about one page) to the page cache with one pwrite, instead of one pwrite
// of 20 bytes per message; Flush, TruncatePhys and a segment roll-over
// write the rest first. Get and every internal read serve entries still in
// that buffer from memory. This widens nothing that matters for
// durability: an entry is durable only once Flush returned, before and
// after this change, and the store re-dispatches every CommitLog record
// past the checkpoint it wrote after its last Flush. A process crash can now
// lose up to WriteBehindEntries entries that a power loss could already
// lose; recovery rebuilds both the same way.
package consumequeue
