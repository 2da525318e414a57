package admin

// Browsing a topic by time: for each queue SEARCH_OFFSET_BY_TIMESTAMP (29)
// finds the first offset stored at or after the time, then the queue is read
// forward from there with PULL_MESSAGE (as ToolsGroup, committing nothing).
// The queues' messages are merged in store-time order.

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// MaxBrowse bounds the messages one Browse returns.
const MaxBrowse = 500

// OffsetByTime returns the first offset of a queue whose message was
// stored at or after t (the queue's max offset if all are older).
func (c *Client) OffsetByTime(ctx context.Context, addr, topic string, queueID int32, t time.Time) (int64, error) {
	resp, err := c.invoke(ctx, addr, remoting.ReqSearchOffsetByTimestamp, map[string]string{
		"topic": topic, "queueId": strconv.Itoa(int(queueID)), "timestamp": strconv.FormatInt(t.UnixMilli(), 10),
	}, nil)
	if err != nil {
		return 0, err
	}
	return atoi(resp.ExtFields["offset"]), nil
}

// Browse returns up to limit (at most MaxBrowse) messages of topic stored
// at or after from, oldest first across all its queues (within a
// millisecond, by broker and then in the broker's CommitLog order). ErrNotFound if the topic does not exist.
func (c *Client) Browse(ctx context.Context, topic string, from time.Time, limit int) ([]Message, error) {
	if limit <= 0 || limit > MaxBrowse {
		limit = MaxBrowse
	}
	t, err := c.DescribeTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	var out []Message
	for _, q := range t.Queues {
		if q.MaxOffset <= q.MinOffset {
			continue
		}
		addr := t.brokerAddr(q.Broker)
		off, err := c.OffsetByTime(ctx, addr, topic, q.QueueID, from)
		if err != nil {
			return nil, err
		}
		// Every queue contributes at most limit: the oldest limit of the
		// merge are among them.
		ms, err := c.readQueue(ctx, addr, topic, q.QueueID, max(off, q.MinOffset), limit)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if !m.StoreTime.Before(from) { // the search is exact; keep the promise anyway
				out = append(out, m)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.StoreTime.Equal(b.StoreTime) {
			return a.StoreTime.Before(b.StoreTime)
		}
		if a.StoreHost != b.StoreHost {
			return a.StoreHost < b.StoreHost
		}
		return a.CommitLogOffset < b.CommitLogOffset // one broker's store order
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
