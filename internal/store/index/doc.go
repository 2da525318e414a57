// Package index implements the message key index, RocketMQ style: hash
// files that map "topic#key" (a message key or unique key) to the CommitLog
// offsets of the records carrying it, newest first.
//
// # On-disk format
//
// The directory <root>/index holds files named by a 20-digit sequence number
// (00000000000000000001, ...). A file is a header, a table of HashSlots
// slots and up to MaxEntries entries, all big-endian:
//
//	header (40 bytes)
//	+----------------+--------------+----------------+--------------+--------------+---------------+
//	| beginTimestamp | endTimestamp | beginPhysOffset| endPhysOffset| hashSlotCount| indexCount    |
//	|  int64, 8 B    |  int64, 8 B  |  int64, 8 B    |  int64, 8 B  |  int32, 4 B  |  int32, 4 B   |
//	+----------------+--------------+----------------+--------------+--------------+---------------+
//	slot i (4 bytes) at 40 + 4*i: int32 number of the newest entry of the slot, 0 = empty
//	entry n (20 bytes, n >= 1) at 40 + 4*hashSlotCount + 20*(n-1):
//	+-------------+------------------+-----------------+----------------+
//	| keyHash     | physOffset       | timeDiffSeconds | prevIndex      |
//	| int32, 4 B  | int64, 8 B       | int32, 4 B      | int32, 4 B     |
//	+-------------+------------------+-----------------+----------------+
//
// keyHash is KeyHash(key): 32-bit FNV-1a of the key bytes with the sign bit
// cleared; the slot is keyHash mod hashSlotCount. timeDiffSeconds is the
// store time minus beginTimestamp, in whole seconds. prevIndex links the
// entries of a slot, newest to oldest. Timestamps are milliseconds since the
// epoch. Unlike RocketMQ, hashSlotCount is the file's slot table size (not
// the number of used slots), so a file stays readable if HashSlots changes,
// and entries are numbered from 1 with no unused entry 0. Files are sparse:
// nothing is preallocated.
//
// Only the hash is stored, so Query returns candidates: the store reads each
// record and keeps those that carry the key.
//
// # Durability and recovery
//
// A new file's header is written and synced before its first entry. Put
// collects entries and slot updates in memory and writes them to the page
// cache in batches, entries before the slots that point at them (Query
// serves the collected ones from memory; the slot table of the file taking
// Puts is kept in memory too, so a Put reads nothing). Flush writes what is
// collected, then syncs each changed file, writes its header (indexCount,
// end fields) and syncs again, so a durable header never counts entries
// that are not durable. Within a
// file physOffset never decreases (a Put that goes backwards starts a new
// file).
//
// Open recovers the newest file (and any file whose size disagrees with its
// header): it takes the header's indexCount, steps back over entries that
// are not plausible (prevIndex >= n, negative fields, physOffset below the
// file's begin or below the previous entry's), rewrites every slot that
// points past that count to the newest earlier entry of its chain, truncates
// the rest and rewrites the header, durably. Entries Put after the last
// Flush are dropped; the store re-indexes the CommitLog from MaxPhysOffset.
// Query also treats an implausible entry as the end of its chain, so a
// damaged file yields fewer results, never a loop or garbage offsets beyond
// what a record check removes.
//
// # Concurrency
//
// One goroutine calls Put; Query and MaxPhysOffset may run concurrently
// with it and with Flush. DeleteBeforePhys, TruncatePhys and Close exclude
// everything else.
package index
