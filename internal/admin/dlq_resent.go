package admin

// The resend log: a durable record of which dead letters were resent, so
// that a resend is done once per message unless forced, and `dlq list`
// shows what was resent however it was (--msg-id or --all).
//
// Each broker holding a DLQ queue keeps the records of its own dead letters
// as messages of the system topic ResentLogTopic (one queue, queue 0) on
// that broker: one record per resend, a JSON body naming the group, the
// DLQ queue and offset (a dead letter's identity: DLQ messages are never
// rewritten) and the new message's id. Records are written after the
// resend succeeded and read back before a resend, so a crash between the
// two can resend that one message again (at-least-once, as for --all's
// cursor). A resend returns only once its record can be read (the broker
// dispatches a message to its queue shortly after storing it), so the next
// command sees it. The records age out with the CommitLog like any message,
// later than the dead letters they describe.
//
// No broker support is needed: records are written with SEND_MESSAGE and
// read with PULL_MESSAGE, directly on the broker (not through the
// NameServer's routes, which learn of a new topic only at the next
// registration).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// ResentLogTopic holds the resend records (a system topic).
const ResentLogTopic = "KEEL_SYS_DLQ_RESENT"

// resentLogQueue is the queue of ResentLogTopic that records are written
// to and read from.
const resentLogQueue = 0

// resentVisiblePoll is how often a resend polls for its record to become
// readable.
const resentVisiblePoll = 5 * time.Millisecond

// ErrAlreadyResent is wrapped by the error for a dead letter that was
// resent before (ResendOptions.Force resends it again).
var ErrAlreadyResent = errors.New("admin: already resent")

// ResendOptions modify a resend.
type ResendOptions struct {
	// Force resends dead letters that were resent before (--all: every
	// stored dead letter, from the oldest).
	Force bool
}

// resentRecord is the body of a record in ResentLogTopic.
type resentRecord struct {
	Group       string `json:"group"`
	QueueID     int32  `json:"dlqQueueId"`
	QueueOffset int64  `json:"dlqQueueOffset"`
	MsgID       string `json:"msgId"`
	NewMsgID    string `json:"newMsgId"`
	Topic       string `json:"topic"`
	Forced      bool   `json:"forced,omitempty"`
	TimeMs      int64  `json:"timeMs"`
}

// resentSet is the DLQ offsets of one group resent on one broker, by queue.
type resentSet map[int32]map[int64]bool

func (s resentSet) has(qid int32, off int64) bool { return s[qid][off] }

func (s resentSet) add(qid int32, off int64) {
	if s[qid] == nil {
		s[qid] = map[int64]bool{}
	}
	s[qid][off] = true
}

// resentOn reads the records of group on the broker at addr.
func (c *Client) resentOn(ctx context.Context, addr, group string) (resentSet, error) {
	set := resentSet{}
	err := c.scanQueue(ctx, addr, ResentLogTopic, resentLogQueue, 0, func(m Message) bool {
		var r resentRecord
		if json.Unmarshal(m.Body, &r) == nil && r.Group == group {
			set.add(r.QueueID, r.QueueOffset)
		}
		return true
	})
	if errors.Is(err, ErrNotFound) { // no record ever written on this broker
		return set, nil
	}
	return set, err
}

// resentOnQueues reads the records of group on every broker of qs.
func (c *Client) resentOnQueues(ctx context.Context, group string, qs []dlqQueue) (map[string]resentSet, error) {
	out := map[string]resentSet{}
	for _, q := range qs {
		if _, ok := out[q.addr]; ok {
			continue
		}
		s, err := c.resentOn(ctx, q.addr, group)
		if err != nil {
			return nil, fmt.Errorf("admin: read the resend log of %s: %w", q.broker, err)
		}
		out[q.addr] = s
	}
	return out, nil
}

// recordResent writes the record of a resend of the dead letter m of q
// and waits until it can be read back.
func (c *Client) recordResent(ctx context.Context, group string, q dlqQueue, m Message, r Resent, forced bool) error {
	body, err := json.Marshal(resentRecord{Group: group, QueueID: q.qid, QueueOffset: m.QueueOffset, MsgID: m.MsgID,
		NewMsgID: r.Result.MsgID, Topic: r.OriginTopic, Forced: forced, TimeMs: time.Now().UnixMilli()})
	if err != nil {
		return err
	}
	b := TopicOnBroker{Broker: q.broker, Addr: q.addr}
	props := map[string]string{
		message.PropKeys:           fmt.Sprintf("%s/%d/%d", group, q.qid, m.QueueOffset),
		message.PropTags:           group,
		message.PropWaitStoreMsgOK: "true",
	}
	rs := rawSend{topic: ResentLogTopic, queueID: resentLogQueue, bornMs: time.Now().UnixMilli(), body: body}
	res, err := c.sendRecord(ctx, b, rs, props)
	if errors.Is(err, ErrNotFound) { // the first record on this broker
		if err = c.putTopic(ctx, q.addr, TopicConfig{Topic: ResentLogTopic, ReadQueues: 1, WriteQueues: 1, Perm: PermRead | PermWrite}); err == nil {
			res, err = c.sendRecord(ctx, b, rs, props)
		}
	}
	if err != nil {
		return fmt.Errorf("admin: dead letter %s was resent as %s, but recording the resend failed "+
			"(it may be resent again): %w", m.MsgID, r.Result.MsgID, err)
	}
	return c.waitReadable(ctx, q.addr, ResentLogTopic, resentLogQueue, res.QueueOffset)
}

func (c *Client) sendRecord(ctx context.Context, b TopicOnBroker, rs rawSend, props map[string]string) (SendResult, error) {
	uniq, err := c.uniqID(ctx, b.Addr)
	if err != nil {
		return SendResult{}, err
	}
	p := make(map[string]string, len(props)+1)
	for k, v := range props {
		p[k] = v
	}
	p[message.PropUniqKey] = uniq
	rs.props = message.EncodeProperties(p)
	return c.sendRaw(ctx, b, rs)
}

// waitReadable waits until the queue's max offset passes off.
func (c *Client) waitReadable(ctx context.Context, addr, topic string, qid int32, off int64) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	for {
		resp, err := c.invoke(ctx, addr, remoting.ReqGetMaxOffset, map[string]string{
			"topic": topic, "queueId": strconv.Itoa(int(qid)),
		}, nil)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if err == nil && atoi(resp.ExtFields["offset"]) > off {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("admin: the resend record at %s:%d offset %d did not become readable: %w", topic, qid, off, ctx.Err())
		case <-time.After(resentVisiblePoll):
		}
	}
}
