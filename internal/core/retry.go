package core

// Retry and dead letters: a consumer returns a message it failed to
// consume (RocketMQ's CONSUMER_SEND_MSG_BACK).
//
// The failed message is read by its CommitLog offset and re-put as a new
// message with the same body, flag, sysFlag, born time and born host and
// properties, reconsumeTimes + 1, RETRY_TOPIC = its topic (if not set yet),
// ORIGIN_MESSAGE_ID = the first delivery's id, and no WAIT property (the
// answer is durable under SYNC_FLUSH, see retryMessage). It goes to
// %RETRY%<group> (a random retry queue) with delay level
// (delayLevel == 0 ? 3 + reconsumeTimes : delayLevel), or to %DLQ%<group>
// (queue 0, no delay) when its reconsumeTimes reached maxReconsumeTimes (the
// request's value, else the group's retryMaxTimes) or delayLevel < 0. The
// delay goes through the Scheduler; without one the retry is put at once
// (hooks.go). A put that is not PutOK is ErrInternal with the put status.

import (
	"context"
	"math/rand/v2"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// SendBack puts the message at CommitLog offset off back for group: into
// its retry topic, or its dead-letter topic (see the file comment).
// maxTimes counts only when hasMax; originID may be empty.
func (b *Broker) SendBack(ctx context.Context, group string, off int64, originID string, delayLevel, maxTimes int32, hasMax bool) error {
	g, err := b.EnsureGroup(group)
	if err != nil {
		return err
	}
	if b.cfg.BrokerPermission&PermWrite == 0 {
		return Errorf(ErrForbidden, "the broker[%s] sending message is forbidden", b.cfg.BrokerName)
	}
	if g.RetryQueueNums <= 0 {
		return nil
	}
	if !hasMax {
		maxTimes = g.RetryMaxTimes
	}
	rec, err := b.st.LookMessageByOffset(off)
	if err != nil {
		return Errorf(ErrInternal, "look message by offset failed, %d", off)
	}
	old, err := message.Decode(rec)
	if err != nil {
		return Errorf(ErrInternal, "look message by offset failed, %d: %v", off, err)
	}
	m, err := b.retryMessage(old, group, g, originID, maxTimes, delayLevel)
	if err != nil {
		return err
	}
	res, err := b.PutRouted(ctx, m)
	if err != nil {
		return err
	}
	if res.Status != store.PutOK {
		return Errorf(ErrInternal, "%s", res.Status.String())
	}
	return nil
}

// retryMessage builds the message put back for a failed delivery of old.
func (b *Broker) retryMessage(old *message.Message, group string, g GroupConfig, originID string, maxTimes, delayLevel int32) (*message.Message, error) {
	props := old.Properties
	if v, ok := message.Property(props, message.PropRetryTopic); !ok || v == "" {
		props = message.SetProperty(props, message.PropRetryTopic, old.Topic)
	}
	if v, ok := message.Property(props, message.PropOriginMessageID); !ok || v == "" {
		if originID == "" {
			originID = message.OffsetMsgID(old.StoreHost, old.PhysOffset)
		}
		props = message.SetProperty(props, message.PropOriginMessageID, originID)
	}
	// Unlike RocketMQ (which sets WAIT=false here) the copy keeps no WAIT
	// property: the consumer moves its offset past the message once the
	// send-back is answered, so under SYNC_FLUSH the answer must wait for
	// the fdatasync like any acknowledged send.
	for _, k := range []string{message.PropWaitStoreMsgOK, message.PropDelayLevel, message.PropTimerDeliverMs, message.PropTimerDelaySec,
		message.PropTimerDelayMs, message.PropTransactionPrepared} {
		props = message.DeleteProperty(props, k)
	}
	topic := RetryTopic(group)
	qid := rand.Int32N(g.RetryQueueNums)
	if old.ReconsumeTimes >= maxTimes || delayLevel < 0 {
		topic, qid = DLQTopic(group), 0
	} else {
		if delayLevel == 0 {
			delayLevel = 3 + old.ReconsumeTimes
		}
		props = message.SetProperty(props, message.PropDelayLevel, itoa(delayLevel))
	}
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	queues := g.RetryQueueNums
	if topic != RetryTopic(group) {
		queues = 1
	}
	if _, err := b.EnsureTopic(topic, queues, PermRW); err != nil {
		return nil, err
	}
	if len(props) > message.MaxPropertiesBytes {
		return nil, Errorf(ErrMessageIllegal, "message properties length %d exceeds the limit", len(props))
	}
	return &message.Message{
		Topic: topic, QueueID: qid, Flag: old.Flag, SysFlag: old.SysFlag &^ message.FlagTxMask,
		BornTimestamp: old.BornTimestamp, BornHost: old.BornHost, StoreHost: b.cfg.StoreHost,
		ReconsumeTimes: old.ReconsumeTimes + 1, Body: old.Body, Properties: props,
	}, nil
}
