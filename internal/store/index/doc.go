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
// Open tells a settled file (its size is exactly that of the entries its
// header counts) from one that was being written when the process stopped:
// Put appends entries before it updates their slots, so any slot or entry
// write not yet covered by a Flush leaves the file longer than its header
// says (and a Flush that died between its two syncs leaves the header
// behind the entries). Rewriting slots in place outside Put (recovery,
// TruncatePhys) first appends a byte and syncs, so that state is visible
// too. No clean-shutdown flag is needed: the file itself tells.
//
// A file that is not settled is rebuilt, because a crash can tear even a
// 4-byte slot write and leave a value that points at an unrelated entry
// the header counts (the older keys of that slot would become
// unreachable). Recovery takes the header's indexCount, steps back over
// entries that are not plausible (prevIndex >= n, negative fields,
// physOffset below the file's begin or below the previous entry's), then
// walks entries 1..count in order: each slot's value becomes the newest
// entry that maps to it, and an entry whose prevIndex is not the previous
// entry of its slot is relinked to it (prevIndex is derived data; cutting
// the chain there instead would lose every older entry of the slot).
// Then it writes the slots that changed, truncates the entries past count
// and rewrites the header, fdatasync before Open returns. Cost: one read
// of the file's entries and slot table (at the default sizes up to 400 MB
// and 20 MB) and a 4-byte-per-slot table in memory, only for files that
// were being written: normally the newest one, after a crash
// (BenchmarkRecoverRebuild: 2,000,000 entries and 500,000 slots in about
// 17 ms on MemFS, against 1 ms to open the settled file; on a disk reading
// the 42 MB dominates). The newest
// file (and the one before it if it is not full) is rebuilt too when a
// slot points past the counted entries, which a disk that reorders
// unsynced writes can leave behind. A settled file is opened without
// writes; the newest one's slot table is read into memory for Put.
//
// Entries Put after the last Flush are dropped; the store re-indexes the
// CommitLog from MaxPhysOffset. Query also treats an implausible entry as
// the end of its chain, so a damaged file yields fewer results, never a
// loop or garbage offsets beyond what a record check removes.
//
// # Concurrency
//
// One goroutine calls Put; Query and MaxPhysOffset may run concurrently
// with it and with Flush. DeleteBeforePhys, TruncatePhys and Close exclude
// everything else.
package index
