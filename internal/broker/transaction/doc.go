// Package transaction implements RocketMQ's transactional ("half")
// messages on the Keel store: the prepared send, the producer's decision
// (End: commit / rollback, as the broker parsed it from END_TRANSACTION;
// the engine answers with a put status, never a response code), the
// check-back service (through Producers: the front door that registered
// the producers asks them) and an operator view. It knows no protocol.
//
// # Records
//
//	RMQ_SYS_TRANS_HALF_TOPIC queue 0     half messages: the prepared message with
//	                                     REAL_TOPIC, REAL_QID, __transactionId__ =
//	                                     UNIQ_KEY, PGROUP kept, sysFlag txn bits cleared
//	RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0  op records: TAGS "d", body = the half queue
//	                                     offsets they decide, comma-separated (as in
//	                                     RocketMQ); Keel adds KEEL_TXN_OP = commit |
//	                                     rollback | discard | recheck and __transactionId__
//	TRANS_CHECK_MAX_TIME_TOPIC queue 0   copies of halves discarded at the check limit
//	<Dir>/config/transaction.json        {"version":1,"halfOffset":H,"opOffset":O}
//
// A half message is decided exactly when an op record names its half queue
// offset; the op log is the durable decision record. All records are
// ordinary store puts, so they follow the store's flush rules (SYNC_FLUSH:
// acknowledged = durable).
//
// # Transactions, not halves
//
// The unit of decision is the transaction id (the UNIQ_KEY of the prepared
// message). A transaction can have several live halves: a producer that
// retried the prepared send, or a crash between a check-back re-put and
// the op record of the half it replaces. END_TRANSACTION for any of its
// halves (even one already replaced by a re-put — a late first answer)
// decides all its live halves with one op record; a transaction without
// live halves is decided, and a repeated END answers SUCCESS and does
// nothing. One goroutine at a time works on a transaction (END or check).
//
// # Commit, and why it is exactly-once
//
// Commit puts the final message (REAL_TOPIC / REAL_QID, properties without
// REAL_TOPIC, REAL_QID and TRAN_MSG, sysFlag COMMIT, PREPARED_TX_OFFSET =
// the half's CommitLog offset, same UNIQ_KEY) and then the op record.
// The CommitLog is a single append-only log recovered as a prefix, so:
//
//  1. If the op record survives a crash, the final message (written before
//     it) survives too: the transaction is decided and never committed again.
//  2. If neither survives, nothing was delivered; the half is undecided
//     and is checked back: committing it then is the first commit.
//  3. If only the final message survives, the half is undecided after the
//     restart. Every half found at recovery (and any half whose commit or
//     op write failed, or that was registered from the queue rather than by
//     its own Prepare) is marked unverified. Before committing an
//     unverified transaction the engine queries the key index for a record
//     on REAL_TOPIC with that UNIQ_KEY and the COMMIT sysFlag; the store
//     rebuilds the index up to the recovered end before Open returns, so
//     such a record is found. If it exists, only the op record is written.
//
// Case 3 relies on the UNIQ_KEY being the transaction id, which holds for
// every half (Prepare refuses a message without one; the broker generates
// one for sends that lack it). Retention can remove a final message older
// than fileReservedTime; a transaction undecided that long is outside the
// guarantee, and a half message retention removed before any decision is
// discarded at the next round (Warn log, Stats.Discarded).
//
// Rollback writes only the op record; a discard writes the copy to
// TRANS_CHECK_MAX_TIME_TOPIC and then the op record (a crash between them
// can leave two copies there, never a delivery).
//
// # Check-back
//
// Run starts a round every CheckInterval (one timer). A round first reads
// any op and half records this process has not seen (after a restart:
// everything after the cursors). A transaction is due when its newest half
// is at least Timeout old (the first check: at least the larger of Timeout
// and CHECK_IMMUNITY_TIME_IN_SECONDS). Then, with at most CheckWorkers at a
// time:
//   - TRANSACTION_CHECK_TIMES >= CheckMax: discard (Warn log, Stats.Discarded);
//   - no producer of PGROUP connected: nothing changes, the next round tries
//     again (the count is not incremented);
//   - otherwise re-put the half with the count + 1 (new offsets), write a
//     recheck op record for the old halves, and send CHECK_TRANSACTION_STATE
//     oneway on the producer's connection: ext tranStateTableOffset /
//     commitLogOffset of the re-put half, msgId, transactionId, offsetMsgId,
//     topic, bname; body = the half record with topic REAL_TOPIC and queue
//     REAL_QID. The producer answers with END_TRANSACTION.
//
// A crash after the re-put but before the recheck record leaves two live
// halves of one transaction; the next round checks the transaction once,
// and any decision covers both.
//
// # Cursors
//
// In memory the engine keeps every undecided half (a map) and a bitmap of
// decided half offsets above the half cursor H, plus the op offsets above
// the op cursor O with the highest half each names. H is the lowest
// undecided half offset (or the first offset not yet seen); O is the first
// op record naming a half >= H. After every round the candidate (H, O) is
// written to transaction.json (temporary file, fsync, rename, fsync of the
// directory) once the CommitLog is flushed past every op record it relies
// on: a candidate computed when the CommitLog was written up to W is saved
// when the flushed offset reaches W, now or at the next round. At start the
// engine reads the op queue from O and the half queue from H; a cursor
// beyond a queue's end (lost unflushed tail) is pulled back to it.
// Memory: one small struct per undecided half plus one bit per half offset
// between H and the newest half.
//
// # Operator view
//
// List (served by the broker as Keel's request ReqListTransactions, used by `keel txn
// list`) returns the undecided half messages with topic, producer group,
// age and check count. Discarded halves stay readable in
// TRANS_CHECK_MAX_TIME_TOPIC.
//
// # Concurrency
//
// Prepare, End, List, Stats and Trigger are safe for concurrent
// use. Run owns the check rounds (CheckOnce may be called directly when Run
// is not running; rounds are serialised). Close stops Run and writes the
// cursors; the store must be closed after it.
package transaction
