package broker

// Consumer offsets and offset lookups: QUERY_CONSUMER_OFFSET (14),
// UPDATE_CONSUMER_OFFSET (15), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
// SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32).
//
// The offsets themselves are the core's (internal/core/offsets.go):
// updates (UPDATE_CONSUMER_OFFSET and the pull COMMIT_OFFSET flag) go to
// memory and are flushed every OffsetFlushInterval and on Close.
// QUERY_CONSUMER_OFFSET applies the core's zero-if-young rule unless the
// request says setZeroIfNotFound=false. The lookups always answer 0 with an
// `offset` (the Go client does not check the code).

import (
	"context"

	"github.com/keelmq/keel/internal/remoting"
)

func offsetResponse(req *remoting.Command, key string, v int64) *remoting.Command {
	resp := req.NewResponse(remoting.ResSuccess, "")
	setExt(resp, key, itoa(v))
	return resp
}

func (b *Broker) handleQueryConsumerOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group, topic := e.required("consumerGroup"), e.required("topic")
	qid := e.int32("queueId", 0, true)
	if e.err != nil {
		return nil, e.err
	}
	if off, ok := b.core.ConsumerOffset(group, topic, qid, e.str("setZeroIfNotFound") != "false"); ok {
		return offsetResponse(req, "offset", off), nil
	}
	return req.NewResponse(remoting.ResQueryNotFound, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"), nil
}

func (b *Broker) handleUpdateConsumerOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group, topic := e.required("consumerGroup"), e.required("topic")
	qid := e.int32("queueId", 0, true)
	off := e.int64("commitOffset", 0, true)
	if e.err != nil {
		return nil, e.err
	}
	if err := b.core.CommitOffset(group, topic, qid, off); err != nil {
		return nil, err
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

func (b *Broker) topicQueue(req *remoting.Command) (string, int32, *ext) {
	e := &ext{req: req}
	topic := e.required("topic")
	qid := e.int32("queueId", 0, true)
	return topic, qid, e
}

func (b *Broker) handleGetMaxOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	topic, qid, e := b.topicQueue(req)
	if e.err != nil {
		return nil, e.err
	}
	return offsetResponse(req, "offset", b.core.MaxOffset(topic, qid)), nil
}

func (b *Broker) handleGetMinOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	topic, qid, e := b.topicQueue(req)
	if e.err != nil {
		return nil, e.err
	}
	return offsetResponse(req, "offset", b.core.MinOffset(topic, qid)), nil
}

func (b *Broker) handleSearchOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	topic, qid, e := b.topicQueue(req)
	ts := e.int64("timestamp", 0, true)
	if e.err != nil {
		return nil, e.err
	}
	return offsetResponse(req, "offset", b.core.OffsetByTime(topic, qid, ts)), nil
}

func (b *Broker) handleEarliestStoreTime(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	topic, qid, e := b.topicQueue(req)
	if e.err != nil {
		return nil, e.err
	}
	ts, err := b.core.EarliestStoreTime(topic, qid)
	if err != nil {
		// RocketMQ answers -1 when the queue has no readable message.
		b.log.Debug("earliest store time unavailable", "topic", topic, "queue_id", qid, "err", err)
		ts = -1
	}
	return offsetResponse(req, "timestamp", ts), nil
}
