package core

// Extension points for the engines built beside the core: scheduled
// delivery (delay levels and TIMER_* timestamps), transactional half
// messages and producer de-duplication. The core validates and routes the
// message; the engine stores it durably and later puts the final message
// with store.PutMessage (which wakes waiting consumers through the
// dispatch listener like any put).
//
// A Scheduler that also has OnDispatch(topic, queueID, queueOffset,
// tagsCode) receives every store dispatch event (the store has one listener,
// owned by the core); it must not block.
//
// Without a Scheduler: a send with DELAY > 0 or a TIMER_* property to an
// ordinary topic is rejected with MESSAGE_ILLEGAL ("scheduled delivery is not
// enabled"); retries (CONSUMER_SEND_MSG_BACK and sends to %RETRY% topics) are
// put into the retry topic at once, without back-off, so failing messages
// still reach the DLQ after maxReconsumeTimes. Without Transactions: a
// prepared (TRAN_MSG) send is ErrForbidden (the RocketMQ adapter answers
// END_TRANSACTION with SYSTEM_ERROR).

import (
	"context"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/pendingtxn"
	"github.com/keelmq/keel/internal/store"
)

// Scheduler holds messages until they are due.
type Scheduler interface {
	// MaxDelayLevel is the highest delay level (18 with the default
	// messageDelayLevel); higher requested levels are clamped to it.
	MaxDelayLevel() int32
	// Schedule durably stores m for delivery to m.Topic / m.QueueID. When
	// level > 0 the message is due after that delay level (1..MaxDelayLevel);
	// otherwise at deliverAtMs (Unix ms, in the future). m carries its DELAY
	// or TIMER_* property; the engine removes it from the delivered copy.
	// On PutOK, m.QueueOffset, m.PhysOffset and m.StoreTimestamp describe
	// the record the engine stored; they are reported to the producer.
	// m.Body aliases the request's frame buffer, which is reused once the
	// send returns: neither m nor its Body may be kept past the return.
	Schedule(ctx context.Context, m *message.Message, level int32, deliverAtMs int64) store.PutResult
}

// Transactions stores half messages and decides them.
type Transactions interface {
	// Prepare durably stores a half message (TRAN_MSG=true, UNIQ_KEY set,
	// m.Topic / m.QueueID the real destination). On PutOK, m's offsets are
	// those of the stored half record: the send response reports
	// msgId(PhysOffset) and queueOffset(QueueOffset). As for Schedule,
	// neither m nor m.Body may be kept past the return.
	Prepare(ctx context.Context, m *message.Message) store.PutResult
	// End records a producer's decision (see EndTransaction). It returns
	// the put status of the write that recorded it (PutOK when the
	// transaction was decided before) with a remark for the producer when
	// that write failed, or an ErrInternal error when d names no half
	// message of its producer group or the half cannot be read.
	End(ctx context.Context, d EndTransaction) (status store.PutStatus, remark string, err error)
}

// EndTransaction is a producer's decision of a transaction, naming its
// half message.
type EndTransaction struct {
	ProducerGroup   string
	CommitLogOffset int64 // the half message's PhysOffset
	QueueOffset     int64 // the half message's offset in the half topic
	Commit          bool  // false: roll back
}

// dispatchObserver is implemented by engines that want the store's dispatch
// events (the store has a single listener, owned by the core).
type dispatchObserver interface {
	OnDispatch(topic string, queueID int32, queueOffset int64, tagsCode int64)
}

// Deduplicator suppresses re-sends of a message already stored (same topic,
// same client UNIQ_KEY). The core calls Check (dedup.go: CheckDuplicate,
// CheckBatchDuplicates) for a single-message send whose properties carried
// a UNIQ_KEY from the client (not one the broker made), before routing (so
// also for prepared and delayed messages), and for each distinct key of a
// batch whose items all carry one (sorted; Go client batches carry none
// and are not checked).
//   - orig != nil: a duplicate; nothing is stored and the send is answered
//     as the first was (msgId from orig.PhysOffset, queueOffset, queueId).
//   - orig == nil: the message is stored as usual, then release is called
//     exactly once with the message as reported (QueueID = the response's
//     queueId; QueueOffset, PhysOffset, StoreTimestamp as put) and the put
//     result, or with (nil, result) if the send failed before the put.
//     The message is only lent to release: it must not be kept after
//     release returns.
//
// Before Check waits for a send of the same key that is being stored, it
// calls BeforeWait(ctx): the caller may hold sends it checked but has not
// handed to the store yet (a connection's burst), the one waited for
// perhaps among them.
//
// err != nil fails the send.
type Deduplicator interface {
	Check(ctx context.Context, topic, uniqKey string) (orig *message.Message, release func(stored *message.Message, res store.PutResult), err error)
}

type dedupBox struct{ d Deduplicator }

// SetDeduplicator installs the de-duplication hook (nil removes it).
func (b *Broker) SetDeduplicator(d Deduplicator) {
	if d == nil {
		b.dedup.Store(nil)
		return
	}
	b.dedup.Store(&dedupBox{d})
}

// Deduplicator returns the installed de-duplication hook, or nil.
func (b *Broker) Deduplicator() Deduplicator {
	if box := b.dedup.Load(); box != nil {
		return box.d
	}
	return nil
}

type schedulerBox struct {
	s   Scheduler
	obs dispatchObserver // s, if it observes dispatch; else nil
}
type transactionsBox struct{ t Transactions }

// SetScheduler installs the scheduled-delivery engine (nil removes it).
func (b *Broker) SetScheduler(s Scheduler) {
	if s == nil {
		b.scheduler.Store(nil)
		return
	}
	obs, _ := s.(dispatchObserver)
	b.scheduler.Store(&schedulerBox{s: s, obs: obs})
}

// SetTransactions installs the transaction engine (nil removes it).
func (b *Broker) SetTransactions(t Transactions) {
	if t == nil {
		b.transactions.Store(nil)
		return
	}
	b.transactions.Store(&transactionsBox{t})
}

// Scheduler returns the installed scheduled-delivery engine, or nil.
func (b *Broker) Scheduler() Scheduler {
	if box := b.scheduler.Load(); box != nil {
		return box.s
	}
	return nil
}

// Transactions returns the installed transaction engine, or nil.
func (b *Broker) Transactions() Transactions {
	if box := b.transactions.Load(); box != nil {
		return box.t
	}
	return nil
}

// TransactionCheck asks a producer about an undecided transaction
// (RocketMQ's CHECK_TRANSACTION_STATE): Half is the transaction's newest
// half message as the producer sees it (its real topic and queue, the
// half record's QueueOffset, PhysOffset and StoreTimestamp,
// TRANSACTION_CHECK_TIMES set); ID is the transaction id. The producer
// answers with a decision (Transactions.End) naming Half's offsets.
type TransactionCheck struct {
	Half *message.Message
	ID   string
}

// PendingTransaction describes one undecided half message (the one
// definition, shared with the admin client that reads the list).
type PendingTransaction = pendingtxn.Transaction

// PendingTransactions lists undecided half messages.
type PendingTransactions = pendingtxn.List

// TransactionLister is implemented by a Transactions engine that lists its
// undecided half messages: of topic and producer group (empty = any),
// oldest first, at most limit (<= 0: all).
type TransactionLister interface {
	List(topic, group string, limit int) PendingTransactions
}

type beforeWaitKey struct{}

// WithBeforeWait returns ctx carrying fn, which BeforeWait(ctx) calls: a
// caller holding work that a wait may depend on (sends checked but not
// yet stored) hands it over in fn before a hook waits.
func WithBeforeWait(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, beforeWaitKey{}, fn)
}

// BeforeWait calls the function WithBeforeWait put in ctx, if any. A hook
// calls it before it waits for another send.
func BeforeWait(ctx context.Context) {
	if fn, _ := ctx.Value(beforeWaitKey{}).(func()); fn != nil {
		fn()
	}
}
