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
// collects entries in memory and writes them to the page cache in batches
// (Query serves the collected ones from memory). The slot table of the
// file taking Puts is kept in memory too (up to 2^24 slots), so a Put reads
// nothing: Put updates the table and marks as dirty the block holding the
// slot (the table's part of a 4 KiB page of the file), and the dirty
// blocks are written by Flush, a run of consecutive blocks (up to 256 KiB)
// at a time, so a Put costs no write of its own. (A table too large to
// cache is updated the old way: each slot written after its entries, in
// the batches.) Flush, for each changed file, writes the collected entries
// and takes the dirty blocks under the index lock, then without it (Puts
// continue) encodes and writes those blocks, syncs, writes the header
// (indexCount, end fields) and syncs again, so a durable header never
// counts entries that are not durable. A roll-over to a new file, and
// TruncatePhys, write every dirty block first. Within a file physOffset
// never decreases (a Put that goes backwards starts a new file).
//
// Open tells a settled file (its size is exactly that of the entries its
// header counts) from one that was being written when the process
// stopped. Each block written since the last completed Flush was dirtied
// by an entry the durable header does not count, and that entry was
// written to the page cache before the block (slot writes never change
// the file's size: the table precedes the entries): so a crash that keeps
// any part of a block write, torn or not, keeps that entry too (or it was
// already synced) and leaves the file longer than its header says, as
// does a Flush that died between its two syncs. Rewriting slots in place
// outside Put and Flush (recovery, TruncatePhys) first appends a byte and
// syncs, so that state is visible too. No clean-shutdown flag is needed:
// the file itself tells.
//
// Deferred slot blocks: at high rates nearly every block of the table
// changes between two Flushes (each new key lands in a random slot), so
// writing the changed blocks meant rewriting the whole table (20 MB at the
// defaults) every Flush, as many bytes to sync as the CommitLog's own at
// twenty thousand messages a second. While more than an eighth of the
// table's blocks changed (Config.LazySlotBlocks) and new entries keep
// coming, Flush leaves the blocks marked for later and writes the entries,
// a marker byte after the last of them, and the header; the durable file
// is then never settled (the marker, or later entries, lie past the
// header's count), so a crash rebuilds its slot table from its durable
// entries, as for any file being written, and the header's count stays
// current (the store re-indexes nothing the header counts). A Flush that
// finds no new entry writes the deferred blocks and truncates the marker
// once it is the last byte (settled again); Close does the same, and a
// roll-over writes every block of the file it leaves, which the next
// Flush settles. The marker is overwritten by the next entries written.
//
// A block is encoded after its Flush took the header's count, so it may
// hold slots of entries Put since: a completed Flush can leave slots that
// point past the counted entries. Every other slot of the file then holds
// the newest counted entry of its slot (a slot updated by a counted entry
// has its block written by that Flush or an earlier one). Open therefore
// also rebuilds a settled file when a slot points past its count, which
// covers too a disk that reorders unsynced writes and keeps a slot without
// its entry. It checks every settled file, reading its slot table, except
// one of exactly MaxEntries entries that is not the newest: the Flush that
// counted its last entry took every block after that entry's Put.
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
// and rewrites the header, fdatasync before Open returns; for the file that
// takes Puts (when blocks may be deferred) the changed slots are not
// written there but marked in its cached table, and a marker byte keeps
// it not settled until a Flush writes them, as for deferred blocks (after
// a crash under load that is the whole table). Cost: one read
// of the file's entries and slot table (at the default sizes up to 400 MB
// and 20 MB) and a 4-byte-per-slot table in memory, only for files that
// were being written: normally the newest one, after a crash
// (BenchmarkRecoverRebuild: 2,000,000 entries and 500,000 slots in about
// 17 ms on MemFS, against 1 ms to open the settled file; on a disk reading
// the 42 MB dominates). A settled file is opened without writes; the
// newest one's slot table is read into memory for Put.
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
// everything else. A Put that rolls over to a new file waits for a Flush
// writing slot blocks of the file it leaves (once per file).
package index
