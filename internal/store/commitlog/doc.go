// Package commitlog is Keel's CommitLog: one append-only log holding the
// records of every topic, split into segment files of a fixed size.
//
// # On-disk format
//
// The log lives in one directory. Each segment file is named by the 20-digit
// decimal CommitLog offset of its first byte; segment k starts at offset
// k*SegmentBytes and the segments present are contiguous (retention removes
// them from the front only). A segment file holds the bytes written to it
// and, while the log runs with PrefillBytes, up to that many zeros after
// them (zero-filled room ahead of the writer, see prefill.go): zeros after
// the last record are never records. Recovery cuts them (counted in
// RecoverResult.ZeroTailBytes, not as a torn tail) and a clean close trims
// them, so a cleanly closed segment file ends where its records end.
//
// A segment is a sequence of entries followed, once the segment is full, by
// a blank marker:
//
//	entry:
//	  off   size  field
//	    0      4  TOTALSIZE   int32, length of the record (the record includes this field)
//	    4      4  MAGICCODE   the record's type (package record): message.MagicV1 for a
//	                          RocketMQ message, or a Kafka batch, AMQP or system magic
//	    8   N-8   ...         rest of the record, laid out as its type says
//	    N      4  CRC         CRC32-C (Castagnoli) of the N record bytes, big-endian
//
// The log frames, checksums and verifies records of every type alike; the
// CheckRecord hook (the store's) checks a type's own structure. A record
// whose magic is no type this version knows but whose CRC matches is not
// garbage: reads (ReadEntry, Reader) return an error wrapping
// ErrUnknownType naming its magic and offset, and the recovery scan and
// Verify stop with that error instead of treating it as an invalid entry
// (which could be cut as a torn tail). It is never skipped. Append accepts
// known types only.
//
//	blank marker (end of segment):
//	    0      4  SIZE        int32, bytes from here to the end of the segment (>= 8)
//	    4      4  MAGICCODE   message.MagicBlank
//
//	hole record (left by a repair, see below):
//	    0      4  TOTALSIZE   int32, N >= 8
//	    4      4  MAGICCODE   MagicHole = 0xCBCBCBCB
//	    8   N-8   fill        0xCB bytes
//	    N      4  CRC         CRC32-C of the N bytes, big-endian
//
//	flushed mark: the file "flushed" in the log directory, 16 bytes
//	    0      4  VERSION     0x4B464D01 ("KFM" 1)
//	    4      8  OFFSET      int64, big-endian: every byte of the log below it
//	                          was covered by a completed fdatasync
//	   12      4  CRC         CRC32-C of bytes 0..11, big-endian
//
// An entry is never split across segments. An entry is placed at position p
// of a segment only if p + N + 4 + 8 <= SegmentBytes, so there is always room
// for the blank marker that closes the segment; an entry that does not fit
// closes the segment with a blank marker and goes to the start of the next.
// A batch of entries that does not fit in what is left of a segment but
// fits in a fresh one goes whole to the next (see Append).
// The CommitLog offset of a record (its PhysOffset, which also names it in
// ConsumeQueue entries and message IDs) is the offset of its first byte.
//
// # Durability and write ordering
//
// There is one writer (Append; callers serialize). Written bytes become
// durable when Flush (run by one flusher goroutine, see RunFlusher) has
// fdatasync'ed every segment holding them; WaitFlushed lets any number of
// writers share one flush (group commit). When a segment is closed, the
// writer writes the blank marker and fdatasyncs the segment before it
// creates the next segment file (and fsyncs the directory). Hence: if a
// segment file exists, every segment before it is complete and durable. The
// recovery scan relies on this to tell a torn tail from corruption.
//
// Any failed fdatasync, and any failed write but the one below, makes the
// Log permanently failed: after a failed fsync the page cache can no longer
// be trusted, so every later Append, Flush and WaitFlushed returns an error
// wrapping ErrFailed and the cause. Data is never reported durable unless an
// fdatasync covering it returned success. Reads keep working.
//
// A write that fails for lack of space (ENOSPC, EDQUOT) before any record of
// its Append reached the log is not fatal: the segment file is cut back to
// the written offset (a short write may have left part of the batch there),
// the written offset does not move and Append returns an error wrapping
// ErrNoSpace; the next Append tries again. If the cut fails too, or records
// of the same Append were already written (a batch that closed a segment),
// the Log fails as above.
//
// # The flushed mark
//
// After every fdatasync, and before it moves the flushed watermark (so
// before any waiter it covered is answered), Flush overwrites the flushed
// mark in place with the new flushed offset: one 16-byte pwrite, with no
// fdatasync of its own. The value written is always durable already, so
// whatever version of the file survives is a lower bound of the durable
// log: after a process kill the page cache holds the last one written,
// which is at or past every acknowledged record (the unsynced window is
// the flush in flight and the writes after it: under SYNC_FLUSH the group
// commit in flight, under ASYNC_FLUSH what the flush interval let
// accumulate); after a power loss an older one may survive, never a
// newer one. Recover writes the recovered end there, durably, before
// any append; Truncate, TruncateFiles, StartAt and a cut by Recover
// lower it, durably, before they remove bytes below it or move the end
// below it. A mark
// that fails its CRC or has another version is ignored (logged); a log
// directory without one (written by an earlier release, which ignores the
// file with a warning) is recovered on the caller's durable offset alone,
// as before, and has one from its first recovery on. A full disk that
// refuses the overwrite (a copy-on-write filesystem) leaves the older
// value, still a lower bound (also in Recover, unless the value on disk
// lies above the recovered end); any other failed write of the mark fails
// the log (in Recover, the start).
//
// # Recovery
//
// Recover scans forward from a given offset (rounded down to its segment,
// or from RecoverOptions.Resume, a segment start or the start of a record
// named by the caller in that or an earlier segment, as long as the first
// entry there names that offset as its own and every entry from there on
// is valid, but for a tail of zeros in the last segment; otherwise from the
// start of Resume's segment), verifying every entry (size, a known type's
// magic, CRC and the optional CheckRecord hook), every hole record and
// every blank marker (its size must reach exactly the segment end). At the
// first invalid entry at position P it looks at the rest of the log:
//
//   - if no valid entry or blank marker exists anywhere after P (in this
//     segment or a later one), P is a torn tail: the bytes from P on (and
//     the later segment files) are copied to RecoverOptions.QuarantineDir
//     and synced, unless they are all zeros; then the segment is truncated
//     at P, later segment files are removed, and the log ends at P. If P
//     lies before RecoverOptions.MustReach (the checkpointed flushed
//     offset) or the flushed mark, the cut would remove durable data:
//     Recover changes nothing and returns a *MissingError, unless Repair
//     is set;
//   - otherwise P is corruption in the middle of the log. Recover returns a
//     *CorruptionError naming the segment file, the offset and the next
//     valid entry Q, and changes nothing, unless RecoverOptions.Repair is
//     set: then it repairs (below) and the scan goes on at P.
//
// # Repair
//
// A repair keeps every entry that verifies. The bytes [P, Q) between the
// invalid entry and the next valid entry (record, hole record or blank
// marker) hold nothing that can be proved intact; they are copied to a new
// file <segment>.<P>.corrupt in RecoverOptions.QuarantineDir and synced,
// then replaced in place, durably, by one hole record of exactly Q-P bytes.
// Q must be at least MinHoleBytes after P and, if it is a record, name Q
// as its own offset (PHYSICALOFFSET): a damaged record's body may hold a
// well-formed entry (producers send any bytes), which must not become a
// record; otherwise the search goes on after Q. If Q lies in a later segment, the rest of this one
// is copied aside and the segment is closed at P with a blank marker
// instead. No offset moves, so ConsumeQueue entries, index entries and
// message IDs of the other records stay true, and the offsets of the lost
// records are never reused. RepairSegment repairs the same way the corrupt
// entries of one segment before the part Recover verified (the store's
// isolated records), verifying that segment from its start.
//
// A hole record is an entry like a record (size, magic, CRC), verified by
// every scan, skipped by Reader and never returned as a record. Its magic
// is its fill byte repeated, so a read at any offset inside it — where a
// ConsumeQueue or index entry says a lost record started — finds the magic
// and fails with ErrHole, which wraps ErrNoRecord: readers skip the offset
// as removed, and offline checks count such entries as lost rather than as
// corruption. A crash during a repair leaves either the old bytes or a
// partial hole record, both invalid: the next repair finds the same range
// again (its quarantine copy gets a new name; evidence is never
// overwritten).
//
// One exception to the second rule: after a crash (RecoverOptions.Crashed),
// an invalid entry in the last segment at or after the durable offset is a
// torn tail even when valid-looking entries follow. The durable offset is
// RecoverOptions.DurableFrom (the checkpointed flushed offset) raised to
// the flushed mark; when neither is known (math.MaxInt64 and no valid
// mark: no checkpoint, a log an earlier release wrote) the exception is
// off and every such entry is corruption. After a power
// failure the page cache may have written unsynced pages back in any
// order, so this pattern is the normal result of losing power under load.
// fdatasync covers every earlier byte of the file, so an invalid entry
// that no completed fdatasync covered has no acknowledged SYNC_FLUSH
// record after it. The bytes after the cut are copied to
// RecoverOptions.QuarantineDir (and counted in
// RecoverResult.UnsyncedBytes) rather than dropped.
//
// Below the durable offset the same pattern cannot be a torn write: those
// bytes were fdatasynced before the crash, so an invalid entry there is
// damage to durable data and is handled as corruption in the middle
// (refused, or repaired into a hole record), logged at Error. The
// checkpoint alone lags the flushed offset by about a second of writes;
// the mark narrows the window in which damage at rest to acknowledged
// data could pass for an unsynced tail to the flush in flight after a
// process kill, and to what the page cache had not yet written back of
// the mark after a power loss (damage at rest and a power loss together).
//
// A segment that ends without a blank marker while a later segment exists is
// treated the same way (the missing end is an invalid entry at the end of
// the file).
//
// Verify runs the same scan over the whole log without changing anything
// (for offline checks), going on after a corrupt entry at the next valid
// one, and lists the hole records it passed (Holes); VerifyAfterCrash
// reports an unsynced tail past the durable offset as a torn tail, as
// Recover would cut it.
//
// Reads return errors wrapping ErrNoRecord for offsets that hold no record
// (before the first segment, in the blank tail of a closed segment),
// ErrBeyondEnd past the written offset, ErrCorrupt for bytes that fail
// verification and ErrUnknownType for a record of an unknown type; only
// the first means "removed".
//
// # Watermarks
//
// The written and flushed offsets are watermarks (package watermark):
// Written() and Flushed() let any number of callers wait for them, blocking
// (WaitFlushed) or by callback (AfterFlush). The writer answers the waiters
// of written right after its write; the acknowledger (RunAcknowledger)
// answers those of flushed after each flush, so the flusher goes on to the
// next fdatasync; a failure of the log answers every waiter of both.
//
// # Concurrency
//
// Append, Recover, Truncate and DeleteBefore must not run concurrently with
// each other (the store holds its append lock). Reads (ReadAt, ReadEntry,
// Reader), Flush, WaitFlushed and the offset accessors are safe to call from
// any goroutine at any time. The background loops (RunFlusher,
// RunAcknowledger, RunPrefiller, RunCacheTrimmer) run one each, started
// after Recover. Lock order: flushMu before prefillMu, prefillMu before
// segMu, segMu before the read window's lock, which is never held across a
// syscall.
//
// The acknowledger, after each fdatasync, calls back every deferred write
// it covered (or that timed out, or that the log's failure ended), so a
// group commit wakes one goroutine rather than one per message. The
// prefiller (Config.PrefillBytes; the store's default under SYNC_FLUSH is
// 16 MiB) keeps zero-filled, synced room ahead of the writer, so an
// fdatasync writes data rather than a new file size (prefill.go). The
// cache trimmer (Config.CacheWindowBytes, commitLogPageCacheBytes in
// broker.conf) releases the page cache of flushed bytes more than that far
// behind the flushed offset (clean pages only, so it writes nothing),
// keeping the log's share of the page cache bounded and letting new writes
// reuse the same memory (cache.go).
//
// # Read window
//
// With Config.ReadWindowBytes (commitLogReadWindowBytes in broker.conf;
// the store's default is 64 MiB) the log keeps its most recently written
// bytes in a ring of that size as well, copied in by the writer after each
// successful write and before the written offset moves past it. A read
// (ReadAt, ReadEntry, ReadRecord, Reader, ReadRaw) whose bytes the ring
// holds is a copy from it instead of a pread: consumers keeping up with the
// producers (whose records interleave with other queues' in the log, so
// that each is a read of its own) and a master's replication read memory;
// a Reader made with NewFileReader (the store's dispatcher, whose read-back
// of what was just written checks the write path) reads the file. The same bounds and checks apply as to a read of
// the file (the written offset, the segments held, every record verified
// by its reader), and the ring never holds a byte the file does not hold at
// the same offset: Truncate cuts it first, StartAt, Recover and a repair
// empty it, a write that does not continue it starts it again, and a
// failed log empties it for good. The re-reads after a failed verification
// (RereadEntry, RereadRecord, Reader.Reread) read the file only. The ring
// is memory only: it starts empty at every start (window.go).
package commitlog
