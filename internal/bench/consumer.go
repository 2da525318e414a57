package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

const (
	// pullSuspend is how long the broker may hold a pull with nothing new.
	pullSuspend = 2 * time.Second
	// pullTimeout bounds one pull request.
	pullTimeout = pullSuspend + 10*time.Second
	// pullErrorBackoff is the pause after a failed pull.
	pullErrorBackoff = 50 * time.Millisecond
)

// consumer is one connection pulling a share of the queues; each queue has
// its own long-polling loop with the offset tracked here.
type consumer struct {
	cl     *remoting.Client
	queues []MessageQueue
	w      *Workload
	st     *stats
	group  string
}

// queueCursor is one queue's pull position; only its loop touches it,
// except end, which is set before the loop starts.
type queueCursor struct {
	q      MessageQueue
	offset int64 // next offset to pull
	// end, when >= 0, makes the loop stop once offset reaches it (drain).
	end int64
}

// run pulls every cursor until ctx ends or every cursor with an end has
// reached it. It returns the cursors' final offsets.
func (c *consumer) run(ctx context.Context, cursors []*queueCursor) {
	var wg sync.WaitGroup
	for _, cur := range cursors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.pullLoop(ctx, cur)
		}()
	}
	wg.Wait()
}

func (c *consumer) pullLoop(ctx context.Context, cur *queueCursor) {
	ext := map[string]string{
		"consumerGroup": c.group, "topic": cur.q.Topic, "queueId": strconv.Itoa(int(cur.q.QueueID)),
		"maxMsgNums": strconv.Itoa(c.w.PullBatchSize), "sysFlag": strconv.Itoa(remoting.PullFlagSuspend | remoting.PullFlagSubscription),
		"commitOffset": "0", "suspendTimeoutMillis": strconv.FormatInt(pullSuspend.Milliseconds(), 10),
		"subscription": "*", "subVersion": "0", "expressionType": "TAG",
	}
	for ctx.Err() == nil && (cur.end < 0 || cur.offset < cur.end) {
		ext["queueOffset"] = strconv.FormatInt(cur.offset, 10)
		if !c.pullOnce(ctx, cur, remoting.NewRequest(remoting.ReqPullMessage, ext, nil)) {
			select {
			case <-ctx.Done():
			case <-time.After(pullErrorBackoff):
			}
		}
	}
}

// pullOnce makes one pull and advances the cursor; false after an error.
func (c *consumer) pullOnce(ctx context.Context, cur *queueCursor, req *remoting.Command) bool {
	pctx, cancel := context.WithTimeout(ctx, pullTimeout)
	resp, err := c.cl.Invoke(pctx, req)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			c.st.recvErrors.Add(1)
			c.st.countError("pull: " + transportErrorKind(err))
		}
		return false
	}
	next, nextErr := resp.ExtInt64("nextBeginOffset")
	switch resp.Code {
	case remoting.ResSuccess:
		c.consume(cur, resp.Body, time.Now())
	case remoting.ResPullNotFound, remoting.ResPullRetryImmediately:
	case remoting.ResPullOffsetMoved:
		c.st.countError("pull: offset moved")
	default:
		c.st.recvErrors.Add(1)
		c.st.countError(fmt.Sprintf("pull: code %d %s", resp.Code, truncate(resp.Remark, 60)))
		return false
	}
	if nextErr != nil {
		c.st.recvErrors.Add(1)
		c.st.countError("pull: response without nextBeginOffset")
		return false
	}
	cur.offset = next
	return true
}

// consume walks the stored records of a pull body.
func (c *consumer) consume(cur *queueCursor, body []byte, now time.Time) {
	want := cur.offset
	var msgs, bytes uint64
	for off := 0; off < len(body); {
		if len(body)-off < 4 {
			c.corrupt("truncated record size")
			break
		}
		n := int(int32(binary.BigEndian.Uint32(body[off:])))
		if n <= 0 || n > len(body)-off {
			c.corrupt("bad record size")
			break
		}
		rec := body[off : off+n]
		off += n
		if err := message.Check(rec); err != nil {
			c.corrupt("corrupt record")
			continue
		}
		v := message.View(rec)
		if v.QueueOffset() != want {
			c.st.outOfOrder.Add(1)
		}
		want = v.QueueOffset() + 1
		b := v.Body()
		msgs++
		bytes += uint64(len(b))
		if len(b) >= stampBytes && string(b[8:stampBytes]) == bodyMagic {
			sent := int64(binary.BigEndian.Uint64(b))
			c.st.e2eLat.Record(time.Duration(now.UnixNano() - sent))
		}
	}
	c.st.received.Add(msgs)
	c.st.recvBytes.Add(bytes)
}

func (c *consumer) corrupt(what string) {
	c.st.recvErrors.Add(1)
	c.st.countError("pull: " + what)
}
