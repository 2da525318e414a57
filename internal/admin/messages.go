package admin

// Messages: look up by id (VIEW_MESSAGE_BY_ID for an offset message id,
// QUERY_MESSAGE by unique key otherwise), query by key, send, and read a
// queue with pulls (tail, DLQ).

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// MaxBodyInflateBytes bounds the decompressed body shown for a compressed
// message.
const MaxBodyInflateBytes = 16 << 20

// Message is a stored message as the tools show it.
type Message struct {
	// MsgID is the unique key the producer saw (UNIQ_KEY), or the offset
	// message id when the message has none.
	MsgID           string            `json:"msgId"`
	OffsetMsgID     string            `json:"offsetMsgId"`
	Topic           string            `json:"topic"`
	QueueID         int32             `json:"queueId"`
	QueueOffset     int64             `json:"queueOffset"`
	CommitLogOffset int64             `json:"commitLogOffset"`
	Tags            string            `json:"tags,omitempty"`
	Keys            string            `json:"keys,omitempty"`
	BornHost        string            `json:"bornHost"`
	StoreHost       string            `json:"storeHost"`
	BornTime        time.Time         `json:"bornTime"`
	StoreTime       time.Time         `json:"storeTime"`
	ReconsumeTimes  int32             `json:"reconsumeTimes"`
	Flag            int32             `json:"flag"`
	SysFlag         int32             `json:"sysFlag"`
	Properties      map[string]string `json:"properties"`
	BodyBytes       int               `json:"bodyBytes"`
	// BodyText holds the body when it is valid UTF-8, else BodyBase64 does.
	// A compressed body is shown decompressed.
	BodyText   string `json:"body,omitempty"`
	BodyBase64 string `json:"bodyBase64,omitempty"`
	// Body is the (decompressed) body; Raw the stored record.
	Body []byte `json:"-"`
	Raw  []byte `json:"-"`
}

// decodeRecord turns one stored record into a Message.
func decodeRecord(rec []byte) (Message, error) {
	m, err := message.Decode(rec)
	if err != nil {
		return Message{}, fmt.Errorf("admin: %w", err)
	}
	props := message.ParseProperties(m.Properties)
	out := Message{
		OffsetMsgID: message.OffsetMsgID(m.StoreHost, m.PhysOffset),
		Topic:       m.Topic, QueueID: m.QueueID, QueueOffset: m.QueueOffset, CommitLogOffset: m.PhysOffset,
		Tags: props[message.PropTags], Keys: props[message.PropKeys],
		BornHost: m.BornHost.String(), StoreHost: m.StoreHost.String(),
		BornTime: time.UnixMilli(m.BornTimestamp), StoreTime: time.UnixMilli(m.StoreTimestamp),
		ReconsumeTimes: m.ReconsumeTimes, Flag: m.Flag, SysFlag: m.SysFlag, Properties: props,
		Body: m.Body, Raw: rec,
	}
	out.MsgID = props[message.PropUniqKey]
	if out.MsgID == "" {
		out.MsgID = out.OffsetMsgID
	}
	if m.SysFlag&message.FlagCompressed != 0 {
		if b, err := inflate(m.Body); err == nil {
			out.Body = b
		}
	}
	out.BodyBytes = len(out.Body)
	if utf8.Valid(out.Body) {
		out.BodyText = string(out.Body)
	} else {
		out.BodyBase64 = base64.StdEncoding.EncodeToString(out.Body)
	}
	return out, nil
}

func inflate(b []byte) ([]byte, error) {
	r, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, MaxBodyInflateBytes))
}

// splitRecords decodes a body of concatenated stored records.
func splitRecords(body []byte) ([]Message, error) {
	var out []Message
	for len(body) > 0 {
		if len(body) < 4 {
			return nil, errors.New("admin: truncated record in response")
		}
		n := int(message.View(body).TotalSize())
		if n < message.MinRecordBytes || n > len(body) {
			return nil, fmt.Errorf("admin: bad record size %d in response", n)
		}
		m, err := decodeRecord(body[:n:n])
		if err != nil {
			return nil, err
		}
		out = append(out, m)
		body = body[n:]
	}
	return out, nil
}

// GetMessage finds a message by id. An offset message id is read from its
// broker; any other id (or an offset id whose broker is unknown) is looked
// up as a unique key in topic, or in every topic when topic is empty. A
// message stored several times (retries, dead letters) yields every copy,
// oldest first.
func (c *Client) GetMessage(ctx context.Context, id, topic string) ([]Message, error) {
	if ms, err := c.viewByOffsetID(ctx, id); err != nil || len(ms) > 0 {
		if err != nil {
			return nil, err
		}
		return ms, nil
	}
	var topics []Topic
	if topic != "" {
		t, err := c.Topic(ctx, topic)
		if err != nil {
			return nil, err
		}
		topics = []Topic{t}
	} else {
		all, err := c.Topics(ctx, false, false)
		if err != nil {
			return nil, err
		}
		topics = all
	}
	var out []Message
	for _, t := range topics {
		ms, err := c.query(ctx, t, id, true, 0, 0, 0)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if m.Properties[message.PropUniqKey] == id {
				out = append(out, m)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: message %s", ErrNotFound, id)
	}
	sortByStoreTime(out)
	return out, nil
}

// viewByOffsetID reads the record an offset message id names from its
// broker: one message, or every record of a Kafka batch (they share the
// batch's offset). When that broker is not registered or does not answer
// (a master that is down), the slaves ReadBrokers reads from in its place
// are asked: they hold the master's records. None: id is not an offset
// id, or not of a record there.
func (c *Client) viewByOffsetID(ctx context.Context, id string) ([]Message, error) {
	host, off, err := message.ParseOffsetMsgID(id)
	if err != nil {
		return nil, nil
	}
	if _, err := c.ReadBrokers(ctx); err != nil { // tells of reads from slaves
		return nil, err
	}
	brokers, err := c.Brokers(ctx)
	if err != nil {
		return nil, err
	}
	var cands []string
	for _, b := range brokers {
		if b.Addr == host.String() {
			cands = append(cands, b.Addr)
		}
	}
	if ms := c.viewAt(ctx, cands, id, off); ms != nil {
		return ms, nil
	}
	var slaves []string
	for _, r := range c.SlaveReads() {
		if !slices.Contains(cands, r.Slave.Addr) {
			slaves = append(slaves, r.Slave.Addr)
		}
	}
	return c.viewAt(ctx, slaves, id, off), nil
}

// viewAt asks each broker of addrs in turn for the record at CommitLog
// offset off and returns its messages if they are those of offset id.
func (c *Client) viewAt(ctx context.Context, addrs []string, id string, off int64) []Message {
	for _, addr := range addrs {
		resp, err := c.invoke(ctx, addr, remoting.ReqViewMessageByID, map[string]string{"offset": strconv.FormatInt(off, 10)}, nil)
		if err != nil {
			continue // not a record there, or no answer
		}
		ms, err := splitRecords(resp.Body)
		if err != nil || len(ms) == 0 || slices.ContainsFunc(ms, func(m Message) bool { return m.OffsetMsgID != strings.ToUpper(id) }) {
			continue
		}
		return ms
	}
	return nil
}

// QueryByKey returns the messages of topic whose KEYS include key (or whose
// unique key is key) stored within [begin, end] (zero times: unbounded),
// at most maxNum per broker (0: the broker's default), oldest first.
// Messages written through the Kafka door are found by their record key,
// those written through the AMQP door by their message-id or
// correlation-id (docs/cross-protocol.md).
func (c *Client) QueryByKey(ctx context.Context, topic, key string, begin, end time.Time, maxNum int) ([]Message, error) {
	var b, e int64
	if !begin.IsZero() {
		b = begin.UnixMilli()
	}
	if !end.IsZero() {
		e = end.UnixMilli()
	}
	t, err := c.Topic(ctx, topic)
	if err != nil {
		return nil, err
	}
	ms, err := c.query(ctx, t, key, false, b, e, maxNum)
	if err != nil {
		return nil, err
	}
	var out []Message
	for _, m := range ms {
		if hasKey(m, key) {
			out = append(out, m)
		}
	}
	sortByStoreTime(out)
	return out, nil
}

func hasKey(m Message, key string) bool {
	uniq := m.Properties[message.PropUniqKey]
	if uniq == key || m.Keys == key {
		return true // a Kafka record's key may hold spaces
	}
	if id, ok := message.ParseConvertedID(uniq); ok && id.Kind == message.ConvertedAMQP && m.Properties[message.PropCorrelationID] == key {
		return true
	}
	for _, k := range strings.Fields(m.Keys) {
		if k == key {
			return true
		}
	}
	return false
}

func sortByStoreTime(ms []Message) {
	sort.SliceStable(ms, func(i, j int) bool {
		if !ms[i].StoreTime.Equal(ms[j].StoreTime) {
			return ms[i].StoreTime.Before(ms[j].StoreTime)
		}
		return ms[i].CommitLogOffset < ms[j].CommitLogOffset
	})
}

// query sends QUERY_MESSAGE to every broker hosting topic t.
func (c *Client) query(ctx context.Context, t Topic, key string, unique bool, begin, end int64, maxNum int) ([]Message, error) {
	if end <= 0 {
		end = time.Now().Add(24 * time.Hour).UnixMilli()
	}
	if maxNum <= 0 {
		maxNum = 64
	}
	var out []Message
	for _, b := range t.Brokers {
		ext := map[string]string{"topic": t.Name, "key": key, "maxNum": strconv.Itoa(maxNum),
			"beginTimestamp": strconv.FormatInt(begin, 10), "endTimestamp": strconv.FormatInt(end, 10)}
		if unique {
			ext["_UNIQUE_KEY_QUERY"] = "true"
		}
		resp, err := c.invoke(ctx, b.Addr, remoting.ReqQueryMessage, ext, nil)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ms, err := splitRecords(resp.Body)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	return out, nil
}
