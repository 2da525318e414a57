package admin

// Reading queues with PULL_MESSAGE as ToolsGroup, with an explicit "*"
// subscription and without committing offsets.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// Pull limits.
const (
	pullBatch   = 32
	tailSuspend = 10 * time.Second // long-poll hold per tail pull
)

// ErrStop, returned by a Tail callback, ends the tail without error.
var ErrStop = errors.New("admin: stop")

type pullResult struct {
	code     int16
	msgs     []Message
	next     int64
	min, max int64
}

// pull sends one PULL_MESSAGE; suspend > 0 lets the broker hold it.
func (c *Client) pull(ctx context.Context, addr, topic string, qid int32, offset int64, n int, suspend time.Duration) (pullResult, error) {
	flag := remoting.PullFlagSubscription
	if suspend > 0 {
		flag |= remoting.PullFlagSuspend
	}
	ext := map[string]string{
		"consumerGroup": ToolsGroup, "topic": topic, "queueId": strconv.Itoa(int(qid)),
		"queueOffset": strconv.FormatInt(offset, 10), "maxMsgNums": strconv.Itoa(n),
		"sysFlag": strconv.Itoa(flag), "commitOffset": "0",
		"suspendTimeoutMillis": strconv.FormatInt(suspend.Milliseconds(), 10),
		"subscription":         "*", "subVersion": "0", "expressionType": "TAG",
	}
	cl, err := c.conn(ctx, addr)
	if err != nil {
		return pullResult{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, suspend+c.cfg.Timeout)
	defer cancel()
	req := remoting.NewRequest(remoting.ReqPullMessage, ext, nil)
	c.sign(req)
	resp, err := cl.Invoke(cctx, req)
	if err != nil {
		return pullResult{}, fmt.Errorf("admin: pull %s:%d from %s: %w", topic, qid, addr, err)
	}
	r := pullResult{code: resp.Code, next: atoi(resp.ExtFields["nextBeginOffset"]),
		min: atoi(resp.ExtFields["minOffset"]), max: atoi(resp.ExtFields["maxOffset"])}
	switch resp.Code {
	case remoting.ResSuccess:
		r.msgs, err = splitRecords(resp.Body)
		return r, err
	case remoting.ResPullNotFound, remoting.ResPullRetryImmediately, remoting.ResPullOffsetMoved:
		return r, nil
	}
	return r, &Error{Addr: addr, Request: remoting.ReqPullMessage, Code: resp.Code, Remark: resp.Remark}
}

// readQueue returns up to limit messages of a queue from offset on.
func (c *Client) readQueue(ctx context.Context, addr, topic string, qid int32, offset int64, limit int) ([]Message, error) {
	var out []Message
	err := c.scanQueue(ctx, addr, topic, qid, offset, func(m Message) bool {
		out = append(out, m)
		return len(out) < limit
	})
	return out, err
}

// scanQueue calls fn with the messages of a queue from offset on, oldest
// first, until the end of the queue or fn returns false.
func (c *Client) scanQueue(ctx context.Context, addr, topic string, qid int32, offset int64, fn func(Message) bool) error {
	for {
		r, err := c.pull(ctx, addr, topic, qid, offset, pullBatch, 0)
		if err != nil {
			return err
		}
		for _, m := range r.msgs {
			if !fn(m) {
				return nil
			}
		}
		if r.code == remoting.ResPullNotFound || r.next <= offset {
			return nil
		}
		offset = r.next
	}
}

// Tail calls fn with every message stored in topic from now on (or, with
// fromBeginning, first those already stored, from the oldest, in store time
// order across queues), until ctx ends (it returns ctx's error) or fn
// returns an error (ErrStop: nil). New messages come as they arrive.
func (c *Client) Tail(ctx context.Context, topic string, fromBeginning bool, fn func(Message) error) error {
	t, err := c.DescribeTopic(ctx, topic)
	if err != nil {
		return err
	}
	if fromBeginning {
		if err := c.tailBacklog(ctx, t, fn); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan Message)
	errc := make(chan error, len(t.Queues))
	var wg sync.WaitGroup
	for _, q := range t.Queues {
		start := q.MaxOffset // the backlog, if asked for, is done
		addr := t.brokerAddr(q.Broker)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- c.tailQueue(ctx, addr, topic, q.QueueID, start, msgs)
		}()
	}
	go func() { wg.Wait(); close(msgs) }()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return firstErr(ctx, errc)
			}
			if err := fn(m); err != nil {
				cancel()
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
		case err := <-errc:
			if err != nil && ctx.Err() == nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func firstErr(ctx context.Context, errc chan error) error {
	for {
		select {
		case err := <-errc:
			if err != nil && ctx.Err() == nil {
				return err
			}
		default:
			return ctx.Err()
		}
	}
}

func (t TopicDetail) brokerAddr(name string) string {
	for _, b := range t.Brokers {
		if b.Broker == name {
			return b.Addr
		}
	}
	return ""
}

func (c *Client) tailQueue(ctx context.Context, addr, topic string, qid int32, offset int64, out chan<- Message) error {
	for ctx.Err() == nil {
		r, err := c.pull(ctx, addr, topic, qid, offset, pullBatch, tailSuspend)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, m := range r.msgs {
			select {
			case out <- m:
			case <-ctx.Done():
				return nil
			}
		}
		if r.code == remoting.ResPullOffsetMoved || r.next > offset {
			offset = r.next
		}
	}
	return nil
}
