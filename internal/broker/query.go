package broker

// QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33), over the core's
// look-ups (core/query.go).
//
// QUERY_MESSAGE looks a key (a KEYS token or a UNIQ_KEY) up in the store's
// index within [beginTimestamp, endTimestamp] and returns the stored records
// concatenated, newest first as the index yields them; the client filters the
// exact key itself. maxNum is capped at MaxQueryNum; unique-key queries use
// DefaultQueryMaxNum. Nothing found -> QUERY_NOT_FOUND (22).
// VIEW_MESSAGE_BY_ID returns the record at a CommitLog offset (the offset
// message id decoded by the client); a bad offset -> SYSTEM_ERROR (1).

import (
	"context"

	"github.com/keelmq/keel/internal/remoting"
)

func (b *Broker) handleQueryMessage(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	topic, key := e.required("topic"), e.required("key")
	maxNum := int(e.int32("maxNum", int32(b.cfg.DefaultQueryMaxNum), false))
	begin := e.int64("beginTimestamp", 0, false)
	end := e.int64("endTimestamp", 0, false)
	if e.err != nil {
		return nil, e.err
	}
	if e.bool("_UNIQUE_KEY_QUERY") {
		maxNum = b.cfg.DefaultQueryMaxNum
	}
	maxNum = min(max(maxNum, 1), b.cfg.MaxQueryNum)
	if end <= 0 {
		end = 1<<63 - 1
	}
	recs, err := b.core.QueryByKey(topic, key, maxNum, begin, end)
	if err != nil {
		return nil, err
	}
	var body []byte
	for _, rec := range recs {
		body = append(body, rec...)
	}
	if len(body) == 0 {
		return nil, protoErrorf(remoting.ResQueryNotFound, "can not find message, maybe time range not correct")
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	setExt(resp, "indexLastUpdateTimestamp", itoa(b.cfg.Now().UnixMilli()),
		"indexLastUpdatePhyoffset", itoa(b.core.VisibleOffset()))
	resp.Body = body
	return resp, nil
}

func (b *Broker) handleViewMessage(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	off := e.int64("offset", 0, true)
	if e.err != nil {
		return nil, e.err
	}
	rec, err := b.core.LookMessage(off)
	if err != nil {
		return nil, protoErrorf(remoting.ResSystemError, "can not find message by the offset, %d", off)
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = rec
	return resp, nil
}
