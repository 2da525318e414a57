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
//
// Records of the other doors (Kafka batches, AMQP messages) are answered
// converted, as a pull delivers them (package translate): a query gives
// only the messages of such a record that have the key (the index names
// the record, which may hold other keys' records), a view every message
// of the record. Their message ids (message.ConvertedID) name their
// record's offset: a query for such an id reads it there, without the
// index.

import (
	"context"
	"slices"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/translate"
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
	if rec := b.convertedByID(key, begin, end); rec != nil && !slices.ContainsFunc(recs, func(r []byte) bool { return samePlace(r, rec) }) {
		recs = append(recs, rec)
	}
	var body []byte
	for _, rec := range recs {
		body = b.appendFound(body, rec, topic, key)
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

// convertedByID returns the record a converted message's id names, if
// key is such an id and a record of its kind stored within [begin, end]
// is there.
func (b *Broker) convertedByID(key string, begin, end int64) []byte {
	id, ok := message.ParseConvertedID(key)
	if !ok || id.Group != 0 && id.Group != message.GroupTag(b.cfg.BrokerName) {
		return nil // another group's record: its offset means nothing here
	}
	rec, err := b.core.LookMessage(id.PhysOffset)
	if err != nil {
		return nil
	}
	t, err := record.TypeOf(rec)
	want := record.KafkaBatch
	if id.Kind == message.ConvertedAMQP {
		want = record.AMQP
	}
	if err != nil || t != want {
		return nil
	}
	if ts := translate.StoreTimestamp(rec); ts < begin || ts > end {
		return nil
	}
	return rec
}

// reader is this broker as the reader of converted messages: its store
// host, and its group's tag in their ids (message.ConvertedID).
func (b *Broker) reader() translate.Broker {
	return translate.Broker{Host: b.storeHost, Group: message.GroupTag(b.cfg.BrokerName)}
}

// appendFound appends a record a look-up found as a RocketMQ reader gets
// it: a RocketMQ message as stored, a record of another type converted
// (only its messages with key, unless key is ""; in topic, unless topic
// is ""). A record that does not convert is logged and left out.
func (b *Broker) appendFound(dst, rec []byte, topic, key string) []byte {
	if t, err := record.TypeOf(rec); err == nil && t == record.RocketMQ {
		return append(dst, rec...)
	}
	out, _, err := translate.AppendRocketMQFound(dst, rec, topic, key, b.reader(), translate.DefaultLimit)
	if err != nil {
		b.log.Error("query: a record of another protocol does not convert for RocketMQ readers; left out", "topic", topic, "err", err)
		return dst
	}
	return out
}

func (b *Broker) handleViewMessage(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	off := e.int64("offset", 0, true)
	if e.err != nil {
		return nil, e.err
	}
	rec, err := b.core.LookMessage(off)
	var body []byte
	if err == nil {
		body = b.appendFound(nil, rec, "", "")
	}
	if len(body) == 0 {
		return nil, protoErrorf(remoting.ResSystemError, "can not find message by the offset, %d", off)
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp, nil
}
