package broker

// SEND_MESSAGE (10, V1 header), SEND_MESSAGE_V2 (310, short keys a..m) and
// SEND_BATCH_MESSAGE (320, V2 header, body = client batch records).
//
// Processing follows RocketMQ's broker: broker and topic write permission,
// topic name validation, auto-creation from the template topic, queue id
// check (negative = random writable queue), maxMessageSize on the request
// body (a batch counts as a whole) -> MESSAGE_ILLEGAL, retry-topic sends over
// the group's maxReconsumeTimes rewritten to %DLQ%<group>, a broker-made
// UNIQ_KEY for single messages without one, the CLUSTER property, bornHost =
// the peer address, storeHost = the advertised address, properties <= 32767
// bytes. Prepared transaction messages go to the Transactions engine and
// delayed/timer messages to the Scheduler (hooks.go). Batches reject retry
// topics, delay and transaction properties.
//
// Every response carries MSG_REGION and TRACE_ON; a stored message (code 0,
// or 10 FLUSH_DISK_TIMEOUT) also msgId (offset message id; comma-joined for a
// batch), queueId, queueOffset (first message) and transactionId (UNIQ_KEY).

import (
	"context"
	"net/netip"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// brokerHandler is the broker's remoting handler. It borrows the request
// body of the send codes only: for SEND_MESSAGE, SEND_MESSAGE_V2 and
// SEND_BATCH_MESSAGE nothing refers to req.Body, or to any slice of it,
// once handleSend has returned, so remoting reuses their frame buffers.
// What makes that true (keep it so when changing anything reachable from
// handleSend):
//   - message.Message values built here alias the body (Body; batch items'
//     bodies); header fields and batch items' properties are string copies.
//   - The store (PutMessage(s), PutMessagesDeferred) encodes every record
//     into its own buffer before it queues the write, and returns only
//     after the write ended, whatever the status (the ctx is not consulted
//     after the encode; a flush wait or its timeout comes after the copy);
//     its pooled put request drops the messages before it is reused.
//   - Under SYNC_FLUSH the response is made after handleSend returned, when
//     the group commit ends (sendCall.put): from the messages' offsets and
//     header fields only, never their bodies.
//   - The Scheduler and Transactions hooks must not keep m or m.Body past
//     their return (schedule.Service and transaction.Engine hand the
//     message, or a copy of it, to the store and keep offsets and strings
//     only).
//   - The Deduplicator's release gets a copy of the message without Body;
//     dedup.Deduplicator keeps offsets only.
//   - Responses carry header fields only, never a body; the Observer gets
//     a topic string and counts; logs are written before the return.
//   - A batch's decoded messages are pooled the same way (batchMsgs): no
//     pointer to one survives the making of the response, which releases
//     them (the dedup release gets a copy).
//   - The sends of a burst (sendburst.go) are stored before HandleBurst
//     returns, which remoting waits for before it reuses their frames.
//   - A panic (recovered in Broker.call) keeps the body (req.KeepBody).
type brokerHandler struct{ b *Broker }

func (h brokerHandler) Handle(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	return h.b.handle(ctx, c, req)
}

// BorrowsBody implements remoting.BodyBorrower.
func (brokerHandler) BorrowsBody(code int16) bool {
	switch code {
	case remoting.ReqSendMessage, remoting.ReqSendMessageV2, remoting.ReqSendBatchMessage:
		return true
	}
	return false
}

// inlineSendBytes is the largest body of a single-message send the
// connection's reader serves itself (RunsInline).
const inlineSendBytes = 64 << 10

// RunsInline implements remoting.InlineRunner: a single-message send of
// at most inlineSendBytes runs on the connection's reader. It waits for
// nothing but the CommitLog's append (under SYNC_FLUSH its response is
// deferred to the group commit, see sendCall.put; a duplicate check waits
// at most for the original's group commit), and costs less than a hand-off
// to a worker, which under load waited in the run queue behind every
// runnable goroutine (sync-async-send: 86-87k msg/s handed over, 105-113k
// inline). Batches still go to workers: decoding one is enough work to
// run in parallel with the reader (sync-batch fell by 13 % inline).
func (brokerHandler) RunsInline(req *remoting.Command) bool {
	switch req.Code {
	case remoting.ReqSendMessage, remoting.ReqSendMessageV2:
		return len(req.Body) <= inlineSendBytes
	}
	return false
}

// ListsExt implements remoting.ExtLister: the send and pull requests'
// ext fields are decoded as a list (their handlers read them only through
// ext and the Command's accessors), which saves the map every one of them
// would otherwise build.
func (brokerHandler) ListsExt(code int16) bool {
	switch code {
	case remoting.ReqSendMessage, remoting.ReqSendMessageV2, remoting.ReqSendBatchMessage, remoting.ReqPullMessage:
		return true
	}
	return false
}

type sendHeader struct {
	producerGroup     string
	topic             string
	defaultTopic      string
	properties        string
	defaultQueueNums  int32
	queueID           int32
	sysFlag           int32
	flag              int32
	reconsumeTimes    int32
	maxReconsumeTimes int32
	hasMaxReconsume   bool
	bornTimestamp     int64
}

func parseSendHeader(req *remoting.Command) (sendHeader, error) {
	k := remoting.SendKeys(req.Code)
	var fs fieldSet
	if req.Code == remoting.ReqSendMessage {
		fs.read(req, k[:], sendFieldV1)
	} else {
		fs.read(req, k[:], sendFieldV2)
	}
	e := ext{req: req}
	int32Of := func(i int, def int32) int32 { return e.int32Val(k[i], fs.val[i], fs.has[i], def, false) }
	h := sendHeader{
		producerGroup:    fs.val[remoting.SendProducerGroup],
		topic:            e.requiredVal(k[remoting.SendTopic], fs.val[remoting.SendTopic], fs.has[remoting.SendTopic]),
		defaultTopic:     fs.val[remoting.SendDefaultTopic],
		defaultQueueNums: int32Of(remoting.SendDefaultTopicQueueNums, 0),
		queueID:          int32Of(remoting.SendQueueID, -1),
		sysFlag:          int32Of(remoting.SendSysFlag, 0),
		bornTimestamp:    e.int64Val(k[remoting.SendBornTimestamp], fs.val[remoting.SendBornTimestamp], fs.has[remoting.SendBornTimestamp], 0, false),
		flag:             int32Of(remoting.SendFlag, 0),
		properties:       fs.val[remoting.SendProperties],
		reconsumeTimes:   int32Of(remoting.SendReconsumeTimes, 0),
	}
	if fs.val[remoting.SendMaxReconsumeTimes] != "" {
		h.maxReconsumeTimes, h.hasMaxReconsume = int32Of(remoting.SendMaxReconsumeTimes, 0), true
	}
	return h, e.err
}

// sendFieldV1 and sendFieldV2 are remoting.SendField for each dialect
// (fieldSet.read's index).
func sendFieldV1(key string) int { return remoting.SendField(remoting.ReqSendMessage, key) }
func sendFieldV2(key string) int { return remoting.SendField(remoting.ReqSendMessageV2, key) }

func (b *Broker) handleSend(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	return b.handleSendIn(ctx, c, req, nil)
}

// handleSendIn is handleSend for a send of a burst (sendburst.go), or of
// none (burst nil).
func (b *Broker) handleSendIn(ctx context.Context, c *remoting.Conn, req *remoting.Command, burst *sendBurst) (*remoting.Command, error) {
	sc := &sendCall{b: b, c: c, req: req, start: time.Now(), bodyLen: len(req.Body), burst: burst}
	resp, err := b.send(ctx, sc)
	if err != nil {
		resp = b.errorResponse(req, err)
	}
	if resp == nil {
		return nil, nil // deferred: sc.put answers when the store does
	}
	return sc.finish(resp), nil
}

// sendCall is one send request on its way through the send path. Its
// response is made from the store's result: at once, or, under SYNC_FLUSH,
// from the store's acknowledger goroutine once the group commit covering
// it has ended, through a deferred remoting reply. No goroutine waits per
// message (one per message, all woken at every group commit, was the
// latency tail at high rates).
type sendCall struct {
	b       *Broker
	c       *remoting.Conn
	req     *remoting.Command // its Body is gone once the handler returned
	start   time.Time
	bodyLen int
	burst   *sendBurst // non-nil: put adds the messages to it (sendburst.go)

	// A single-message send's message, its list, its response and its
	// Reply are made in the sendCall, which one allocation makes (sendOne,
	// putOne, put).
	msg  message.Message
	msgs [1]*message.Message
	resp remoting.ResponseBuf
	// reply is the deferred response's Reply (sendCall.put).
	reply remoting.Reply
}

// finish adds what every send response carries and reports the request.
func (sc *sendCall) finish(resp *remoting.Command) *remoting.Command {
	setExt(resp, message.PropMsgRegion, sc.b.cfg.RegionID, message.PropTraceOn, strconv.FormatBool(sc.b.cfg.TraceOn))
	sc.b.observeSend(sc.req, resp, sc.bodyLen, sc.start)
	return resp
}

// put stores ms and returns respond's response to the result. When the
// result waits for a flush it returns nil instead, and the response is
// sent when the store answers. respond then runs on the store's
// acknowledger goroutine, after the handler returned: it must not block,
// and must not read the messages' bodies (they alias the request's frame,
// reused by then); their offsets and header fields are theirs to read.
func (sc *sendCall) put(ctx context.Context, ms []*message.Message, respond func(store.PutResult) *remoting.Command) *remoting.Command {
	if sc.c == nil || !sc.b.st.SyncFlush() {
		// Answered at once (ASYNC_FLUSH), or called without a connection
		// to answer later through.
		return respond(sc.b.st.PutMessages(ctx, ms))
	}
	reply := sc.c.DeferIn(sc.req, &sc.reply) // before the put: its callback may run before the put returns
	if sc.burst != nil {
		sc.burst.add(sc, ms, respond, reply)
		return nil
	}
	res, pending := sc.b.st.PutMessagesDeferred(ctx, ms, func(res store.PutResult) { sc.answer(reply, respond, res) })
	if pending {
		return nil
	}
	return respond(res)
}

// answer sends respond's response to res through reply (a deferred send's
// answer, on the store's acknowledger goroutine or a burst's reader).
func (sc *sendCall) answer(reply *remoting.Reply, respond func(store.PutResult) *remoting.Command, res store.PutResult) {
	defer func() {
		if r := recover(); r != nil {
			sc.b.log.Error("send response panic", "code", sc.req.Code, "panic", r, "stack", string(debug.Stack()))
			reply.Send(sc.req.NewResponse(remoting.ResSystemError, "internal error"))
		}
	}()
	reply.Send(sc.finish(respond(res)))
}

func (b *Broker) send(ctx context.Context, sc *sendCall) (*remoting.Command, error) {
	req := sc.req
	h, err := parseSendHeader(req)
	if err != nil {
		return nil, err
	}
	if resp := b.refuseSend(req); resp != nil {
		return resp, nil
	}
	if h.queueID, err = b.core.CheckSend(h.topic, h.defaultTopic, h.defaultQueueNums, h.queueID, len(req.Body)); err != nil {
		return nil, err
	}
	if req.Code == remoting.ReqSendBatchMessage {
		return b.sendBatch(ctx, sc, h)
	}
	return b.sendOne(ctx, sc, h)
}

func (b *Broker) sendOne(ctx context.Context, sc *sendCall, h sendHeader) (*remoting.Command, error) {
	req := sc.req
	m := &sc.msg
	*m = message.Message{
		Topic: h.topic, QueueID: h.queueID, Flag: h.flag, SysFlag: h.sysFlag,
		BornTimestamp: h.bornTimestamp, BornHost: peerAddr(sc.c), StoreHost: b.storeHost,
		ReconsumeTimes: h.reconsumeTimes, Body: req.Body, Properties: h.properties,
	}
	uniq, clientKey, err := b.core.PrepareMessage(m, h.maxReconsumeTimes, h.hasMaxReconsume)
	if err != nil {
		return nil, err
	}
	queueID := m.QueueID
	dd, err := b.core.CheckDuplicate(ctx, m, uniq, clientKey) // core/dedup.go
	if err != nil {
		return nil, err
	}
	if dd == nil {
		return b.putOne(ctx, sc, m, queueID, uniq, nil)
	}
	if dd.Duplicate() {
		return b.duplicateResponse(req, dd.Result[0], uniq), nil
	}
	handedOver := false
	defer func() {
		if !handedOver { // a routing error or a panic: the key is not stored
			dd.Abort()
		}
	}()
	resp, err := b.putOne(ctx, sc, m, queueID, uniq, dd)
	handedOver = err == nil
	return resp, err
}

// putOne routes and stores one message and makes the send response (nil
// when it comes later, see sendCall.put). If it returns no error it
// finishes dd (if not nil) exactly once with the store's result, before
// the response is made.
func (b *Broker) putOne(ctx context.Context, sc *sendCall, m *message.Message, queueID int32, uniq string, dd *core.Dedup) (*remoting.Command, error) {
	sc.msgs[0] = m
	ms := sc.msgs[:]
	respond := func(res store.PutResult) *remoting.Command {
		if dd != nil {
			dd.Finish(res, queueID)
		}
		resp := b.putResponseIn(&sc.resp, sc.req, res, ms)
		if res.Status == store.PutOK || res.Status == store.PutFlushDiskTimeout {
			setExt(resp, "queueId", itoa(queueID), "transactionId", uniq)
		}
		return resp
	}
	res, routed, err := b.core.Route(ctx, m)
	if err != nil {
		return nil, err
	}
	if routed {
		return respond(res), nil
	}
	return sc.put(ctx, ms, respond), nil
}

// duplicateResponse answers a re-sent message as the first send was.
func (b *Broker) duplicateResponse(req *remoting.Command, orig *message.Message, uniq string) *remoting.Command {
	resp := req.NewResponse(remoting.ResSuccess, "")
	setExt(resp, "msgId", message.OffsetMsgID(b.storeHost, orig.PhysOffset), "queueOffset", itoa(orig.QueueOffset),
		"queueId", itoa(orig.QueueID), "transactionId", uniq)
	return resp
}

func (b *Broker) sendBatch(ctx context.Context, sc *sendCall, h sendHeader) (*remoting.Command, error) {
	bm := batchMsgsPool.Get().(*batchMsgs)
	resp, err := b.sendBatchWith(ctx, sc, h, bm)
	if err != nil {
		bm.release() // else the response's maker released it (not after a panic: whatever it interrupted may still hold them)
	}
	return resp, err
}

// sendBatchWith decodes and stores a batch. Once it stores, the function
// that makes the response releases bm; on an error it has not.
func (b *Broker) sendBatchWith(ctx context.Context, sc *sendCall, h sendHeader, bm *batchMsgs) (*remoting.Command, error) {
	if err := core.CheckBatch(h.topic); err != nil {
		return nil, err
	}
	born := peerAddr(sc.c)
	// Counted first (at most message.MaxBatchMessages): the slab is sized
	// once, not doubled as it fills, so the batch's memory is its count
	// times a message, once.
	n, err := message.BatchLen(sc.req.Body)
	if err != nil {
		return nil, protoErrorf(remoting.ResMessageIllegal, "bad batch body: %v", err)
	}
	bm.slab = slices.Grow(bm.slab[:0], n)
	bm.ms = slices.Grow(bm.ms[:0], n)
	err = message.DecodeBatch(sc.req.Body, func(it message.BatchItem) error {
		if err := core.CheckBatchItem(it.Properties); err != nil {
			return err
		}
		bm.slab = append(bm.slab, message.Message{
			Topic: h.topic, QueueID: h.queueID, Flag: it.Flag, SysFlag: h.sysFlag &^ message.FlagTxMask,
			BornTimestamp: h.bornTimestamp, BornHost: born, StoreHost: b.storeHost,
			ReconsumeTimes: h.reconsumeTimes, Body: it.Body, Properties: it.Properties,
		})
		return nil
	})
	if err != nil {
		if _, _, ok := errorCode(err); ok {
			return nil, err
		}
		return nil, protoErrorf(remoting.ResMessageIllegal, "bad batch body: %v", err)
	}
	if len(bm.slab) == 0 {
		return nil, protoErrorf(remoting.ResMessageIllegal, "empty batch")
	}
	ms := bm.pointers()
	bd, err := b.core.CheckBatchDuplicates(ctx, h.topic, ms)
	if err != nil {
		return nil, err
	}
	if bd != nil {
		return b.putDedupBatch(ctx, sc, h, bd, bm), nil
	}
	return sc.put(ctx, ms, func(res store.PutResult) *remoting.Command {
		resp := b.putResponse(sc.req, res, ms)
		if res.Status == store.PutOK || res.Status == store.PutFlushDiskTimeout {
			setExt(resp, "queueId", itoa(h.queueID))
		}
		bm.release()
		return resp
	}), nil
}

// batchMsgs holds the decoded messages of one batch request. Like the
// request's body (see brokerHandler), they are used only until sendBatch
// returns; then they are cleared and pooled for the next batch.
type batchMsgs struct {
	slab []message.Message
	ms   []*message.Message
}

// maxPooledBatchMsgs keeps unusually large batches' arrays out of the pool.
const maxPooledBatchMsgs = 1024

var batchMsgsPool = sync.Pool{New: func() any { return new(batchMsgs) }}

// pointers returns a pointer to every decoded message (the slab no longer
// grows, so they stay valid).
func (bm *batchMsgs) pointers() []*message.Message {
	for i := range bm.slab {
		bm.ms = append(bm.ms, &bm.slab[i])
	}
	return bm.ms
}

// release clears the messages (they refer to the request's body and
// strings) and pools bm.
func (bm *batchMsgs) release() {
	if cap(bm.slab) > maxPooledBatchMsgs {
		return
	}
	clear(bm.slab)
	clear(bm.ms)
	bm.slab, bm.ms = bm.slab[:0], bm.ms[:0]
	batchMsgsPool.Put(bm)
}

// putDedupBatch stores the items of a checked batch that are not
// duplicates and answers for all of them (core/dedup.go); the
// response's maker releases bm.
func (b *Broker) putDedupBatch(ctx context.Context, sc *sendCall, h sendHeader, bd *core.Dedup, bm *batchMsgs) *remoting.Command {
	respond := func(res store.PutResult) *remoting.Command {
		bd.Finish(res, h.queueID)
		resp := b.putResponse(sc.req, res, bd.Result)
		if res.Status == store.PutOK || res.Status == store.PutFlushDiskTimeout {
			setExt(resp, "queueId", itoa(bd.Result[0].QueueID))
		}
		bm.release()
		return resp
	}
	if len(bd.Store) == 0 {
		return respond(store.PutResult{Status: store.PutOK})
	}
	return sc.put(ctx, bd.Store, respond)
}

// putResponse maps a put result to the send response.
func (b *Broker) putResponse(req *remoting.Command, res store.PutResult, ms []*message.Message) *remoting.Command {
	return b.putResponseIn(nil, req, res, ms)
}

// putResponseIn is putResponse, its success response made in buf (if not
// nil; see remoting.ResponseBuf).
func (b *Broker) putResponseIn(buf *remoting.ResponseBuf, req *remoting.Command, res store.PutResult, ms []*message.Message) *remoting.Command {
	code := putStatusCode(res.Status)
	if code != remoting.ResSuccess && code != remoting.ResFlushDiskTimeout && code != remoting.ResFlushSlaveTimeout {
		remark := res.Status.String()
		if res.Err != nil {
			remark += ": " + res.Err.Error()
		}
		if code == remoting.ResSystemError && res.Status != store.PutInSyncReplicasNotEnough {
			b.log.Error("put failed", "topic", ms[0].Topic, "status", res.Status.String(), "err", res.Err)
		}
		return req.NewResponse(code, remark)
	}
	var resp *remoting.Command
	if buf != nil {
		resp = req.NewResponseIn(buf, code, "")
	} else {
		resp = req.NewResponse(code, "")
	}
	setExt(resp, "msgId", joinOffsetMsgIDs(b.storeHost, ms), "queueOffset", itoa(ms[0].QueueOffset))
	return resp
}

// joinOffsetMsgIDs returns the offset message IDs of ms separated by
// commas. The IDs share the store host prefix and differ only in their last
// 16 hex digits (the CommitLog offset), so the string is built in one
// buffer instead of one string per message.
func joinOffsetMsgIDs(host netip.AddrPort, ms []*message.Message) string {
	first := message.OffsetMsgID(host, ms[0].PhysOffset)
	if len(ms) == 1 {
		return first
	}
	prefix := first[:len(first)-16]
	var sb strings.Builder
	sb.Grow(len(ms)*(len(first)+1) - 1)
	sb.WriteString(first)
	for _, m := range ms[1:] {
		sb.WriteByte(',')
		sb.WriteString(prefix)
		for shift := 60; shift >= 0; shift -= 4 {
			sb.WriteByte(upperHexDigits[uint64(m.PhysOffset)>>shift&0xF])
		}
	}
	return sb.String()
}

const upperHexDigits = "0123456789ABCDEF"
