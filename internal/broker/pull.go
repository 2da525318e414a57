package broker

// PULL_MESSAGE (11).
//
// Checks, in RocketMQ's order: broker readable (else 16), subscription group
// known or auto-created (26) and allowed to consume (16), topic exists (17)
// and is readable (16), queueId inside [0, readQueueNums) (29). The
// subscription comes from the request when sysFlag bit2 (SUBSCRIPTION) is set,
// otherwise from the group's heartbeat: no group info or no subscription for
// the topic -> 24, older than the request's subVersion -> 25, a broadcasting
// group on a group with consumeBroadcastEnable=false -> 16, SQL92 -> 1.
//
// The store result maps to the response code exactly as RocketMQ does:
//
//	FOUND                          0  body = stored records, oldest first
//	NO_MATCHED_MESSAGE             20 (all scanned entries filtered out)
//	MESSAGE_WAS_REMOVING           20
//	OFFSET_OVERFLOW_ONE            19 (offset == max: nothing new)
//	OFFSET_OVERFLOW_BADLY          21
//	OFFSET_TOO_SMALL               21
//	NO_MATCHED_LOGIC_QUEUE / NO_MESSAGE_IN_QUEUE: 19 at offset 0, else 21
//
// Every response carries nextBeginOffset, minOffset, maxOffset and
// suggestWhichBrokerId (the Go client adopts nextBeginOffset blindly). The
// body is the stored bytes, never re-encoded nor copied (records of other
// protocols, a Kafka batch or an AMQP message, are converted: pull_types.go): the response lends
// the store's pooled record buffers as BodyParts and releases them in
// OnWritten (after the socket write, or when the response is dropped). With COMMIT_OFFSET the
// request's commitOffset is stored for the group (first processing only).
// A 19 on a request with SUSPEND is held (longpoll.go) and answered when the
// queue advances or the suspend timeout passes. Limits: MaxPullMessages and
// MaxPullBytes per response (at least one message).

import (
	"context"
	"time"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

type pullRequest struct {
	group          string
	topic          string
	queueID        int32
	offset         int64
	maxMsgs        int
	sysFlag        int32
	commitOffset   int64
	suspend        time.Duration
	subscription   string
	expressionType string
	subVersion     int64
}

// The ext fields of a pull request, as indexes into pullKeys.
const (
	pullGroup = iota
	pullTopic
	pullQueueID
	pullQueueOffset
	pullMaxMsgNums
	pullSysFlag
	pullCommitOffset
	pullSuspend
	pullSubscription
	pullExpressionType
	pullSubVersion
	pullFields
)

var pullKeys = [pullFields]string{"consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag",
	"commitOffset", "suspendTimeoutMillis", "subscription", "expressionType", "subVersion"}

// pullField returns the index in pullKeys of key, or -1.
func pullField(key string) int {
	switch key {
	case "consumerGroup":
		return pullGroup
	case "topic":
		return pullTopic
	case "queueId":
		return pullQueueID
	case "queueOffset":
		return pullQueueOffset
	case "maxMsgNums":
		return pullMaxMsgNums
	case "sysFlag":
		return pullSysFlag
	case "commitOffset":
		return pullCommitOffset
	case "suspendTimeoutMillis":
		return pullSuspend
	case "subscription":
		return pullSubscription
	case "expressionType":
		return pullExpressionType
	case "subVersion":
		return pullSubVersion
	}
	return -1
}

func (b *Broker) parsePull(req *remoting.Command) (pullRequest, error) {
	var fs fieldSet
	fs.read(req, pullKeys[:], pullField)
	e := ext{req: req}
	str := func(i int) string { return e.requiredVal(pullKeys[i], fs.val[i], fs.has[i]) }
	int64Of := func(i int, required bool) int64 { return e.int64Val(pullKeys[i], fs.val[i], fs.has[i], 0, required) }
	int32Of := func(i int, def int32, required bool) int32 {
		return e.int32Val(pullKeys[i], fs.val[i], fs.has[i], def, required)
	}
	p := pullRequest{
		group:          str(pullGroup),
		topic:          str(pullTopic),
		queueID:        int32Of(pullQueueID, 0, true),
		offset:         int64Of(pullQueueOffset, true),
		maxMsgs:        int(int32Of(pullMaxMsgNums, 32, false)),
		sysFlag:        int32Of(pullSysFlag, 0, false),
		commitOffset:   int64Of(pullCommitOffset, false),
		suspend:        time.Duration(int64Of(pullSuspend, false)) * time.Millisecond,
		subscription:   fs.val[pullSubscription],
		expressionType: fs.val[pullExpressionType],
		subVersion:     int64Of(pullSubVersion, false),
	}
	p.maxMsgs = min(max(p.maxMsgs, 1), b.cfg.MaxPullMessages)
	return p, e.err
}

func (b *Broker) handlePull(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	p, err := b.parsePull(req)
	if err != nil {
		return nil, err
	}
	resp, err := b.pull(c, req, p, true)
	b.observePull(req, resp, err)
	return resp, err
}

// pull serves a pull. first is false when a held pull is re-run: then it
// neither commits nor holds again.
func (b *Broker) pull(c *remoting.Conn, req *remoting.Command, p pullRequest, first bool) (*remoting.Command, error) {
	sub, err := b.checkPull(p)
	if err != nil {
		return nil, err
	}
	res, err := b.st.GetMessage(p.topic, p.queueID, p.offset, p.maxMsgs, b.cfg.MaxPullBytes, sub.Filter())
	if err != nil {
		return nil, protoErrorf(remoting.ResSystemError, "pull %s:%d at %d failed: %v", p.topic, p.queueID, p.offset, err)
	}
	lent := false // the records went to the response, which releases them
	defer func() {
		if !lent {
			res.Release()
		}
	}()
	converted, err := b.convertForeign(p, res) // other protocols' records as RocketMQ messages (pull_types.go)
	if err != nil {
		return nil, err
	}
	code := pullStatusCode(res.Status, p.offset)
	if code == remoting.ResSuccess && len(res.Records) == 0 {
		code = remoting.ResPullRetryImmediately // defensive: FOUND must carry messages
	}
	if first && p.sysFlag&remoting.PullFlagCommitOffset != 0 && b.cfg.BrokerID == 0 {
		b.core.RecordOffset(p.group, p.topic, p.queueID, p.commitOffset)
	}
	if code == remoting.ResPullNotFound && first && p.sysFlag&remoting.PullFlagSuspend != 0 {
		if b.pulls.hold(c, req, p, sub) {
			return nil, nil
		}
		return nil, protoErrorf(remoting.ResSystemBusy, "too many held pull requests (%d)", b.cfg.MaxHeldPulls)
	}
	resp := req.NewResponse(code, res.Status.String())
	setExt(resp,
		"nextBeginOffset", itoa(res.NextOffset),
		"minOffset", itoa(res.MinOffset),
		"maxOffset", itoa(res.MaxOffset),
		"suggestWhichBrokerId", itoa(b.suggestBroker(p.group, res))) // slaveread.go
	if code == remoting.ResSuccess {
		// Zero copy: the connection writes the store's buffers with one
		// vectored write and releases them once written or dropped.
		resp.BodyParts, resp.OnWritten, lent = res.Records, res.Release, true
		resp.HeldBytes = res.HeldBytes() + converted // whole buffers: the connection's byte budget counts them
		b.observeDeliver(p.topic, len(res.Records))
	}
	return resp, nil
}

// checkPull validates the request and resolves its subscription.
func (b *Broker) checkPull(p pullRequest) (*subscription, error) {
	g, err := b.core.CheckRead(p.group, p.topic, p.queueID)
	if err != nil {
		return nil, err
	}
	if p.sysFlag&remoting.PullFlagSubscription != 0 {
		return parseSubscription(p.topic, p.subscription, p.expressionType, p.subVersion)
	}
	model, sub, ok := b.core.Consumers().Lookup(p.group, p.topic)
	switch {
	case !ok:
		return nil, protoErrorf(remoting.ResSubscriptionNotExist, "the consumer's group info not exist")
	case model == "BROADCASTING" && !g.ConsumeBroadcastEnable:
		return nil, protoErrorf(remoting.ResNoPermission, "the consumer group[%s] can not consume by broadcast way", p.group)
	case sub == nil:
		return nil, protoErrorf(remoting.ResSubscriptionNotExist, "the consumer's subscription not exist")
	case sub.Err != nil:
		return nil, sub.Err
	case sub.Version < p.subVersion:
		return nil, protoErrorf(remoting.ResSubscriptionNotLatest, "the consumer's subscription not latest")
	}
	return sub, nil
}

func pullStatusCode(st store.GetStatus, offset int64) int16 {
	switch st {
	case store.Found:
		return remoting.ResSuccess
	case store.NoMatchedMessage, store.MessageWasRemoving:
		return remoting.ResPullRetryImmediately
	case store.OffsetOverflowOne:
		return remoting.ResPullNotFound
	case store.OffsetOverflowBadly, store.OffsetTooSmall:
		return remoting.ResPullOffsetMoved
	case store.NoMatchedLogicQueue, store.NoMessageInQueue:
		if offset != 0 {
			return remoting.ResPullOffsetMoved
		}
		return remoting.ResPullNotFound
	default:
		return remoting.ResSystemError
	}
}
