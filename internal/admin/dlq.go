package admin

// Dead letters: list the messages of %DLQ%<group> and resend them to the
// topic they were first sent to (their RETRY_TOPIC property).
//
// A resent message is a new message on the original topic with the dead
// letter's body, flag, tags, keys and user properties, reconsumeTimes 0 (it
// gets a fresh set of retries), the property KEEL_DLQ_RESEND_TIMES counting
// how often it was resent, and a new unique key: the broker's producer
// de-duplication would otherwise take it for the original send and drop it.
// ORIGIN_MESSAGE_ID keeps the first delivery's id (send-back sets it; a
// dead letter without it gets its own unique key there). Broker-internal
// properties (delay, retry topic, real topic/queue, transaction) are dropped.
//
// ResendAll works through each DLQ queue from a cursor kept as the consumer
// offset of ResendGroup on that queue, committed after every message, so
// running it again resends only what arrived since; it skips what a resend
// of one message (ResendDLQ) recorded in the resend log (dlq_resent.go). A
// dead letter is resent once unless forced. A crash between a resend and
// its commit or record can resend that one message again (at-least-once).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// PropResendTimes counts the resends of a dead letter.
const PropResendTimes = "KEEL_DLQ_RESEND_TIMES"

// DefaultDLQListLimit bounds `dlq list` per queue.
const DefaultDLQListLimit = 100

// DLQMessage is one dead letter.
type DLQMessage struct {
	Message
	Broker      string `json:"broker"`
	OriginTopic string `json:"originTopic"`
	// Resent reports that it was resent: ResendAll's cursor has passed it,
	// or the resend log records it.
	Resent bool `json:"resent"`
}

// DLQ is a group's dead-letter queue.
type DLQ struct {
	Group    string       `json:"group"`
	Topic    string       `json:"topic"`
	Total    int64        `json:"total"`   // messages stored
	Pending  int64        `json:"pending"` // not resent yet
	Messages []DLQMessage `json:"messages"`
}

// Resent reports one resend: MsgID is the dead letter's id, Result.MsgID
// the new message's.
type Resent struct {
	DLQOffset   int64      `json:"dlqQueueOffset"`
	MsgID       string     `json:"msgId"`
	OriginTopic string     `json:"topic"`
	Result      SendResult `json:"result"`
}

type dlqQueue struct {
	broker, addr  string
	qid           int32
	min, max, cur int64
}

// dlqQueues returns the queues of a group's DLQ with their resend cursors.
// A group without a DLQ has no queues; a group no broker knows is
// ErrNotFound, as for DescribeGroup.
func (c *Client) dlqQueues(ctx context.Context, group string) (string, []dlqQueue, error) {
	topic := DLQPrefix + group
	t, err := c.DescribeTopic(ctx, topic)
	if errors.Is(err, ErrNotFound) {
		if _, gerr := c.DescribeGroup(ctx, group); gerr != nil {
			return topic, nil, gerr
		}
		return topic, nil, nil // nothing ever died
	}
	if err != nil {
		return topic, nil, err
	}
	var out []dlqQueue
	for _, q := range t.Queues {
		dq := dlqQueue{broker: q.Broker, addr: t.brokerAddr(q.Broker), qid: q.QueueID, min: q.MinOffset, max: q.MaxOffset}
		cur, err := c.resendCursor(ctx, dq.addr, topic, q.QueueID)
		if err != nil {
			return topic, nil, err
		}
		dq.cur = max(cur, dq.min)
		out = append(out, dq)
	}
	return topic, out, nil
}

func (c *Client) resendCursor(ctx context.Context, addr, topic string, qid int32) (int64, error) {
	resp, err := c.invoke(ctx, addr, remoting.ReqQueryConsumerOffset, map[string]string{
		"consumerGroup": ResendGroup, "topic": topic, "queueId": strconv.Itoa(int(qid)), "setZeroIfNotFound": "false",
	}, nil)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return atoi(resp.ExtFields["offset"]), nil
}

func (c *Client) commitCursor(ctx context.Context, addr, topic string, qid int32, off int64) error {
	_, err := c.invoke(ctx, addr, remoting.ReqUpdateConsumerOffset, map[string]string{
		"consumerGroup": ResendGroup, "topic": topic, "queueId": strconv.Itoa(int(qid)),
		"commitOffset": strconv.FormatInt(off, 10),
	}, nil)
	return err
}

// ListDLQ returns a group's dead letters, at most limit per queue (<= 0:
// DefaultDLQListLimit), oldest first.
func (c *Client) ListDLQ(ctx context.Context, group string, limit int) (DLQ, error) {
	if limit <= 0 {
		limit = DefaultDLQListLimit
	}
	topic, qs, err := c.dlqQueues(ctx, group)
	d := DLQ{Group: group, Topic: topic, Messages: []DLQMessage{}}
	if err != nil {
		return d, err
	}
	logs, err := c.resentOnQueues(ctx, group, qs)
	if err != nil {
		return d, err
	}
	for _, q := range qs {
		ms, err := c.readQueue(ctx, q.addr, topic, q.qid, q.min, limit)
		if err != nil {
			return d, err
		}
		if n := len(ms); n > 0 { // stored after the offsets were read
			q.max = max(q.max, ms[n-1].QueueOffset+1)
		}
		d.Total += q.max - q.min
		d.Pending += q.max - q.cur
		for off := range logs[q.addr][q.qid] {
			if off >= q.cur && off < q.max {
				d.Pending--
			}
		}
		for _, m := range ms {
			d.Messages = append(d.Messages, DLQMessage{Message: m, Broker: q.broker,
				OriginTopic: m.Properties[message.PropRetryTopic],
				Resent:      m.QueueOffset < q.cur || logs[q.addr].has(q.qid, m.QueueOffset)})
		}
	}
	return d, nil
}

// ResendDLQ is ResendDLQWith without options.
func (c *Client) ResendDLQ(ctx context.Context, group, id string) (Resent, error) {
	return c.ResendDLQWith(ctx, group, id, ResendOptions{})
}

// ResendDLQWith resends the dead letter whose id (unique key, offset
// message id or ORIGIN_MESSAGE_ID) is id; if several copies match, the
// newest. A dead letter resent before is refused with ErrAlreadyResent
// unless o.Force. The resend is recorded in the resend log.
func (c *Client) ResendDLQWith(ctx context.Context, group, id string, o ResendOptions) (Resent, error) {
	topic, qs, err := c.dlqQueues(ctx, group)
	if err != nil {
		return Resent{}, err
	}
	var found *Message
	var foundQ dlqQueue
	for _, q := range qs {
		err := c.scanQueue(ctx, q.addr, topic, q.qid, q.min, func(m Message) bool {
			if matchesID(m, id) {
				found, foundQ = &m, q
			}
			return true
		})
		if err != nil {
			return Resent{}, err
		}
	}
	if found == nil {
		return Resent{}, fmt.Errorf("%w: message %s in the dead-letter queue of %s", ErrNotFound, id, group)
	}
	if !o.Force {
		log, err := c.resentOn(ctx, foundQ.addr, group)
		if err != nil {
			return Resent{}, err
		}
		if found.QueueOffset < foundQ.cur || log.has(foundQ.qid, found.QueueOffset) {
			return Resent{}, fmt.Errorf("%w: dead letter %s of %s (DLQ queue %d offset %d) was resent before",
				ErrAlreadyResent, id, group, foundQ.qid, found.QueueOffset)
		}
	}
	r, err := c.resend(ctx, *found)
	if err != nil {
		return r, err
	}
	return r, c.recordResent(ctx, group, foundQ, *found, r, o.Force)
}

func matchesID(m Message, id string) bool {
	return m.MsgID == id || strings.EqualFold(m.OffsetMsgID, id) || m.Properties[message.PropOriginMessageID] == id
}

// ResendAll is ResendAllWith without options.
func (c *Client) ResendAll(ctx context.Context, group string) ([]Resent, error) {
	return c.ResendAllWith(ctx, group, ResendOptions{})
}

// ResendAllWith resends every dead letter of group past the resend cursor
// that the resend log does not record as resent, and advances the cursor
// after each one (skipped ones included). With o.Force it resends every
// stored dead letter, from the oldest. It stops at the first failure,
// returning what was resent so far.
func (c *Client) ResendAllWith(ctx context.Context, group string, o ResendOptions) ([]Resent, error) {
	topic, qs, err := c.dlqQueues(ctx, group)
	out := []Resent{}
	if err != nil {
		return out, err
	}
	logs, err := c.resentOnQueues(ctx, group, qs)
	if err != nil {
		return out, err
	}
	for _, q := range qs {
		from := q.cur
		if o.Force {
			from = q.min
		}
		for off := from; off < q.max; {
			ms, err := c.readQueue(ctx, q.addr, topic, q.qid, off, int(min(q.max-off, pullBatch)))
			if err != nil {
				return out, err
			}
			if len(ms) == 0 {
				break
			}
			for _, m := range ms {
				off = m.QueueOffset + 1
				if !o.Force && logs[q.addr].has(q.qid, m.QueueOffset) {
					continue // resent on its own (--msg-id); the cursor passes it below
				}
				r, err := c.resend(ctx, m)
				if err != nil {
					return out, err
				}
				out = append(out, r)
				if err := c.advanceCursor(ctx, topic, &q, off); err != nil {
					return out, err
				}
			}
			if err := c.advanceCursor(ctx, topic, &q, off); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// advanceCursor commits q's resend cursor at off if that moves it forward.
func (c *Client) advanceCursor(ctx context.Context, topic string, q *dlqQueue, off int64) error {
	if off <= q.cur {
		return nil
	}
	if err := c.commitCursor(ctx, q.addr, topic, q.qid, off); err != nil {
		return err
	}
	q.cur = off
	return nil
}

// resend sends a dead letter back to its original topic.
func (c *Client) resend(ctx context.Context, m Message) (Resent, error) {
	r := Resent{DLQOffset: m.QueueOffset, MsgID: m.MsgID, OriginTopic: m.Properties[message.PropRetryTopic]}
	if r.OriginTopic == "" {
		return r, fmt.Errorf("admin: dead letter %s has no RETRY_TOPIC property: its original topic is unknown", m.MsgID)
	}
	old, err := message.Decode(m.Raw)
	if err != nil {
		return r, fmt.Errorf("admin: %w", err)
	}
	t, err := c.topic(ctx, r.OriginTopic, true)
	if err != nil {
		return r, fmt.Errorf("admin: resend %s: %w", m.MsgID, err)
	}
	b, qid, err := pickWriteQueue(t, "", -1)
	if err != nil {
		return r, err
	}
	uniq, err := c.uniqID(ctx, b.Addr)
	if err != nil {
		return r, err
	}
	props := resendPropertiesMap(m.Properties)
	props[message.PropUniqKey] = uniq
	rs := rawSend{topic: r.OriginTopic, queueID: qid, flag: old.Flag, sysFlag: old.SysFlag & message.FlagCompressed,
		bornMs: time.Now().UnixMilli(), props: message.EncodeProperties(props), body: old.Body}
	r.Result, err = c.sendRaw(ctx, b, rs)
	r.Result.MsgID = uniq
	return r, err
}

// brokerProps are set by the broker for its own bookkeeping and never
// carried over to a resent message.
var brokerProps = []string{
	message.PropDelayLevel, message.PropRetryTopic, message.PropRealTopic, message.PropRealQueueID,
	message.PropTransactionPrepared, message.PropTransactionPreparedQueueOffset, message.PropCluster,
	message.PropTimerDeliverMs, message.PropTimerDelaySec, message.PropTimerDelayMs, message.PropTimerOutMs,
	message.PropTimerEnqueueMs, message.PropReconsumeTime, message.PropMsgRegion, message.PropTraceOn,
	"MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME",
}

func resendPropertiesMap(old map[string]string) map[string]string {
	p := make(map[string]string, len(old)+1)
	for k, v := range old {
		p[k] = v
	}
	for _, k := range brokerProps {
		delete(p, k)
	}
	if p[message.PropOriginMessageID] == "" && old[message.PropUniqKey] != "" {
		p[message.PropOriginMessageID] = old[message.PropUniqKey]
	}
	n, _ := strconv.Atoi(old[PropResendTimes])
	p[PropResendTimes] = strconv.Itoa(n + 1)
	p[message.PropWaitStoreMsgOK] = "true"
	return p
}
