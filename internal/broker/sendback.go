package broker

// CONSUMER_SEND_MSG_BACK (36): a consumer returns a message it failed to
// consume.
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
// (hooks.go). Put OK -> 0, otherwise SYSTEM_ERROR with the put status.
// The retry itself is the core's (internal/core/retry.go).

import (
	"context"

	"github.com/keelmq/keel/internal/remoting"
)

func (b *Broker) handleSendBack(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group := e.required("group")
	off := e.int64("offset", 0, true)
	delayLevel := e.int32("delayLevel", 0, false)
	originID := e.str("originMsgId")
	maxTimes, hasMax := int32(0), e.str("maxReconsumeTimes") != ""
	if hasMax {
		maxTimes = e.int32("maxReconsumeTimes", 0, false)
	}
	if e.err != nil {
		return nil, e.err
	}
	if err := b.core.SendBack(ctx, group, off, originID, delayLevel, maxTimes, hasMax); err != nil {
		return nil, err
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
}
