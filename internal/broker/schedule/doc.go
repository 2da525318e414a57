// Package schedule holds messages until they are due: RocketMQ's delay
// levels (property DELAY, messageDelayLevel) and arbitrary delivery times
// (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS). The broker's retry
// back-off (CONSUMER_SEND_MSG_BACK) uses the delay levels.
//
// # One mechanism: fixed-delay FIFO queues
//
// Every queue of a schedule topic has one constant delay, so its entries
// become due in the order they were appended and the service only ever looks
// at the head of each queue:
//
//	SCHEDULE_TOPIC_XXXX  queue level-1   delay = messageDelayLevel[level-1]
//	KEEL_SYS_TIMER       queue k=0..17   delay = 2^k seconds
//
// A scheduled message is an ordinary stored message in one of those queues,
// with its destination in REAL_TOPIC / REAL_QID. The ConsumeQueue tag code of
// an entry is the time the service acts on it (TagsCode); the service itself
// recomputes that time from the record it reads, so a stale tag code never
// makes a delivery early.
//
// Delay levels: an entry of level queue q is due at storeTimestamp +
// delay(q). Levels above the configured maximum are clamped to it; entries of
// queues that no longer exist after a configuration change use the largest
// delay.
//
// Timers form a binary cascade. The absolute due time D (ms) is stored in
// TIMER_OUT_MS. A message with remaining delay d goes to queue k = the
// largest with 2^k s <= d (queue 0 when d < 1 s). When its queue delay has
// passed, the remaining d' < 2^k s: it is put again into the queue for d',
// and so on until d' < 1 s; then the service waits for D itself and
// delivers. Precisely, the action time of an entry of queue k stored at T is
// F = min(T + 2^k s, D), or D when D - F < 1 s. Write amplification: a timer
// costs the first put, at most one re-put per set bit of the delay in
// seconds (popcount; a store timestamp a few ms after the decision can turn
// a lower bit pattern into more set bits, so the hard bound is the bit
// length, 18 for the 3-day maximum), and the delivery.
//
// Retention: a schedule entry is an ordinary CommitLog record, so a delay
// level longer than the store's fileReservedTime (72h) can lose entries to
// retention before they are due (as in RocketMQ). Timer entries are re-put
// at least every 2^17 s (about 36 h), well within it.
//
// Timing: never early (an entry is acted on only when the clock has reached
// its time). Late by the wake-up latency, plus, for an entry queued behind a
// timer head that waits out its last sub-second remainder, less than one
// second.
//
// # Delivery
//
// The due message is put to REAL_TOPIC / REAL_QID with the same body, flag,
// sysFlag, born and store host, born timestamp and reconsume times; DELAY and
// TIMER_* properties are removed, REAL_TOPIC / REAL_QID stay. The store
// assigns a new CommitLog offset and queue offset and recomputes the tag code
// from TAGS; its dispatch listener wakes long-polling consumers. The puts for
// a run of consecutive due entries of one queue (deliveries and cascade
// moves) are one combined append, all or nothing. An entry without a usable
// REAL_TOPIC / REAL_QID cannot be delivered: it is logged and skipped (it
// stays readable in the schedule queue).
//
// Schedule removes WAIT from the schedule record, so under SYNC_FLUSH its
// acknowledgement always means synced (whatever WAIT the message carried;
// the core's retries carry none). WAIT=false is set on delivered copies (as RocketMQ does) only when the
// store has a Flush method, which the service then calls before every cursor
// write. Without it the property is removed instead, so under SYNC_FLUSH the
// append itself is synced before the cursor can move past its entries. Under
// ASYNC_FLUSH without Flush, a power loss can lose a delivered copy written
// after the last background flush, like any acknowledged message.
//
// # Cursors (on disk)
//
// Per queue a cursor is the next queue offset to process. After every round
// that moved a cursor the service makes the delivered puts durable (see
// WAIT above) and then rewrites
//
//	<Dir>/config/delayOffset.json
//	{"version":1,"offsetTable":{"SCHEDULE_TOPIC_XXXX":{"0":12},"KEEL_SYS_TIMER":{"3":4}}}
//
// through a temporary file, fsync, rename and fsync of the directory. A crash
// between a delivery and the cursor write delivers that message again after
// the restart (at-least-once); nothing is lost and nothing is delivered
// early. A cursor beyond the end of its queue (the store lost an unflushed
// tail) is pulled back to the end; one below the queue's first offset
// (retention removed entries) moves up to it, with a warning.
//
// # Concurrency
//
// One goroutine (Run) owns the cursors and does all reading and delivery. It
// sleeps on a timer armed for the earliest action time and is woken by
// Schedule (an entry it just stored) and by OnDispatch (the store made an
// entry of a schedule queue visible); there is no polling, except a short
// retry while an entry Schedule stored is not yet visible to readers.
// Schedule, OnDispatch and MaxDelayLevel are safe for concurrent use.
package schedule
