package translate

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"unicode/utf8"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/record"
)

// Property names (Kafka header names) of the mapping; docs/cross-protocol.md
// has the tables.
const (
	PropKafkaOffset      = "KAFKA_OFFSET"
	PropKafkaKeyBase64   = "KAFKA_KEY_BASE64"
	PropContentType      = "CONTENT_TYPE"
	PropContentEncoding  = "CONTENT_ENCODING"
	PropCorrelationID    = message.PropCorrelationID
	PropAMQPReplyTo      = "AMQP_REPLY_TO"
	PropAMQPDeliveryMode = "AMQP_DELIVERY_MODE"
	PropAMQPPriority     = "AMQP_PRIORITY"
	PropAMQPExpiration   = "AMQP_EXPIRATION"
	PropAMQPType         = "AMQP_TYPE"
	PropAMQPUserID       = "AMQP_USER_ID"
	PropAMQPAppID        = "AMQP_APP_ID"
	PropAMQPClusterID    = "AMQP_CLUSTER_ID"
	PropAMQPExchange     = "AMQP_EXCHANGE"
	PropAMQPRoutingKey   = "AMQP_ROUTING_KEY"
)

// DefaultLimit is the limit the front doors pass: the most bytes one
// stored record may inflate or convert to.
const DefaultLimit = 64 << 20

// reservedProps are the RocketMQ properties a Kafka header or an AMQP
// header never sets on a converted message: the broker or the client act
// on them (a RETRY_TOPIC would change the topic the client reports), or
// the conversion sets them itself.
var reservedProps = map[string]bool{
	message.PropKeys: true, message.PropUniqKey: true, message.PropWaitStoreMsgOK: true,
	message.PropDelayLevel: true, message.PropRetryTopic: true, message.PropRealTopic: true,
	message.PropRealQueueID: true, message.PropTransactionPrepared: true, message.PropProducerGroup: true,
	message.PropTransactionID: true, message.PropReconsumeTime: true, message.PropMaxReconsumeTimes: true,
	message.PropTimerDeliverMs: true, message.PropTimerDelaySec: true, message.PropTimerDelayMs: true,
	message.PropTimerOutMs: true, message.PropTimerEnqueueMs: true, message.PropTransactionPreparedQueueOffset: true,
	"MIN_OFFSET": true, "MAX_OFFSET": true, "INNER_BATCH": true, PropKafkaOffset: true, PropKafkaKeyBase64: true,
}

// neutral is a message between formats: the RocketMQ property namespace
// (which is also the Kafka header namespace) plus key, value and time.
type neutral struct {
	key     []byte // nil: none
	value   []byte
	headers []Header
	bornMs  int64
	storeMs int64
}

// origin says where a converted message came from; it makes the
// deterministic message id (message.ConvertedID).
type origin = message.ConvertedID

// propText reports whether s can be a RocketMQ property name or value as
// every client reads it: no separator bytes, valid UTF-8.
func propText(s []byte) bool {
	return utf8.Valid(s) && message.ValidPropertyText(string(s))
}

// errStop ends an EachKafkaRecord early.
var errStop = errors.New("translate: stop")

// envelopeDest returns the queue offset of the destination (topic,
// queueID) of an enveloped record.
func envelopeDest(e record.Envelope, topic string, queueID int32) (int64, error) {
	qo := int64(-1)
	e.EachDest(func(_ int, t []byte, qid int32, off, _ int64, _ int) error {
		if qo < 0 && qid == queueID && string(t) == topic {
			qo = off
		}
		return nil
	})
	if qo < 0 {
		return 0, fmt.Errorf("%w: the record has no destination %s/%d", ErrMalformed, topic, queueID)
	}
	return qo, nil
}

// RocketMQ conversion: the MessageExt bytes of a pull response.

// AppendRocketMQ appends to dst the RocketMQ stored records (the MessageExt
// layout a pull response carries) for rec, a Kafka batch or an AMQP record
// read from queue (topic, queueID): one message per Kafka record, one for
// an AMQP message. A record with one ConsumeQueue entry per message
// (record.FlagEntryPerMessage: the Kafka batches this release stores)
// gives each message its own entry's queue offset; an older batch, with
// one entry for all its records, gives them all that entry's offset.
// reader is the broker that reads it (the messages' store host, its
// group's tag in their ids). A record
// that inflates or converts beyond limit bytes is refused (ErrTooLarge).
// It returns the extended dst and the number of messages appended.
func AppendRocketMQ(dst, rec []byte, topic string, queueID int32, reader Broker, limit int) ([]byte, int, error) {
	return AppendRocketMQEntries(dst, rec, topic, queueID, -1, -1, reader, limit)
}

// Broker is the broker converted messages are read from.
type Broker struct {
	Host  netip.AddrPort // its address: the messages' store host
	Group uint32         // message.GroupTag of its brokerName (0: none), in the messages' ids
}

// AppendRocketMQEntries is AppendRocketMQ for the messages of rec at the
// queue offsets [from, to) of its entries in (topic, queueID) only (from
// < 0: all), each with its own queue offset: what a pull that read those
// entries of a record with one entry per message delivers. For a record
// with one entry, from and to do not matter: it converts whole.
func AppendRocketMQEntries(dst, rec []byte, topic string, queueID int32, from, to int64, reader Broker, limit int) ([]byte, int, error) {
	if err := record.CheckEnvelope(rec); err != nil {
		return dst, 0, err
	}
	e := record.Envelope(rec)
	qo, err := envelopeDest(e, topic, queueID)
	if err != nil {
		return dst, 0, err
	}
	perEntry := e.Flags()&record.FlagEntryPerMessage != 0
	if !perEntry || from < 0 {
		from, to = qo, qo+e.Entries()
	}
	m := message.Message{Topic: topic, QueueID: queueID, QueueOffset: qo, PhysOffset: e.PhysOffset(),
		StoreTimestamp: e.StoreTimestamp(), StoreHost: reader.Host, BornHost: netip.AddrPortFrom(netip.IPv4Unspecified(), 0)}
	start, n := len(dst), 0
	var pb []byte
	add := func(nm *neutral, o origin, kafkaOffset int64) error {
		pb = appendRocketMQProperties(pb[:0], nm, o, kafkaOffset)
		m.Body, m.Properties, m.BornTimestamp = nm.value, string(pb), nm.bornMs
		if m.BornTimestamp == 0 {
			m.BornTimestamp = m.StoreTimestamp
		}
		if len(dst)-start+m.StoredSize() > limit {
			return fmt.Errorf("%w: the converted messages pass %d bytes", ErrTooLarge, limit)
		}
		var err error
		if dst, err = m.AppendStored(dst); err != nil {
			return err
		}
		n++
		return nil
	}
	switch e.Type() {
	case record.KafkaBatch:
		var i int32
		err = EachKafkaRecord(e.Body(), limit, func(r *KafkaRecord) error {
			at := qo + int64(i) // the record's own entry
			o := origin{PhysOffset: e.PhysOffset(), Index: i, Kind: message.ConvertedKafka, Group: reader.Group}
			i++
			if perEntry {
				if at < from {
					return nil
				}
				if at >= to {
					return errStop
				}
				m.QueueOffset = at
			}
			nm := neutral{key: r.Key, value: r.Value, headers: r.Headers, bornMs: r.Timestamp}
			return add(&nm, o, r.Offset)
		})
		if err == errStop {
			err = nil
		}
	case record.AMQP:
		var nm neutral
		if nm, err = neutralOfAMQP(e); err == nil {
			err = add(&nm, origin{PhysOffset: e.PhysOffset(), Kind: message.ConvertedAMQP, Group: reader.Group}, -1)
		}
	default:
		err = fmt.Errorf("translate: a %v is not converted for RocketMQ consumers", e.Type())
	}
	if err != nil {
		return dst[:start], 0, err
	}
	return dst, n, nil
}

// appendRocketMQProperties appends nm's key and headers encoded as
// RocketMQ properties (see the package documentation), within the V1
// layout's limit; kafkaOffset < 0: none.
func appendRocketMQProperties(b []byte, nm *neutral, o origin, kafkaOffset int64) []byte {
	sep := func() { b = append(b, message.PropertySeparator) }
	b = append(b, message.PropUniqKey...)
	b = append(b, message.NameValueSeparator)
	b = o.Append(b)
	sep()
	if kafkaOffset >= 0 {
		b = append(b, PropKafkaOffset...)
		b = append(b, message.NameValueSeparator)
		b = strconv.AppendInt(b, kafkaOffset, 10)
		sep()
	}
	add := func(k string, v []byte) bool {
		if len(b)+len(k)+len(v)+2 > message.MaxPropertiesBytes {
			return false
		}
		b = append(b, k...)
		b = append(b, message.NameValueSeparator)
		b = append(b, v...)
		sep()
		return true
	}
	if len(nm.key) > 0 {
		if propText(nm.key) {
			add(message.PropKeys, nm.key)
		} else {
			add(PropKafkaKeyBase64, base64.StdEncoding.AppendEncode(nil, nm.key))
		}
	}
	var seen map[string]bool // past a few headers: a linear look-back would be quadratic
	if len(nm.headers) > 8 {
		seen = make(map[string]bool, len(nm.headers))
	}
	for i, h := range nm.headers {
		k := h.Key
		if seen != nil && seen[k] || seen == nil && seenBefore(nm.headers[:i], k) {
			continue // the first header of a name decides
		}
		if seen != nil {
			seen[k] = true
		}
		if k == "" || reservedProps[k] || h.Value == nil || !utf8.ValidString(k) || !message.ValidPropertyText(k) || !propText(h.Value) {
			continue
		}
		if !add(k, h.Value) {
			break
		}
	}
	return b
}

// seenBefore reports whether a header named k is among hs.
func seenBefore(hs []Header, k string) bool {
	for _, h := range hs {
		if h.Key == k {
			return true
		}
	}
	return false
}

// Kafka conversion.

// KafkaRecordOf converts rec, a RocketMQ message or an AMQP record, into a
// Kafka record at Kafka offset off (see the package documentation for the
// mapping). A body that inflates beyond limit bytes is refused.
func KafkaRecordOf(rec []byte, off int64, limit int) (KafkaRecord, error) {
	nm, err := neutralOf(rec, limit)
	if err != nil {
		return KafkaRecord{}, err
	}
	ts := nm.bornMs
	if ts <= 0 {
		ts = nm.storeMs
	}
	return KafkaRecord{Offset: off, Timestamp: ts, Key: nm.key, Value: nonNil(nm.value), Headers: nm.headers}, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// neutralOf decodes a RocketMQ message or an AMQP record.
func neutralOf(rec []byte, limit int) (neutral, error) {
	t, err := record.TypeOf(rec)
	if err != nil {
		return neutral{}, err
	}
	switch t {
	case record.RocketMQ:
		return neutralOfRocketMQ(rec, limit)
	case record.AMQP:
		if err := record.CheckEnvelope(rec); err != nil {
			return neutral{}, err
		}
		return neutralOfAMQP(record.Envelope(rec))
	}
	return neutral{}, fmt.Errorf("translate: a %v is not converted here", t)
}

// neutralOfRocketMQ: KEYS is the key; every other property a header
// (in stored order); the body inflated when the message says it is
// compressed; the born time.
func neutralOfRocketMQ(rec []byte, limit int) (neutral, error) {
	if err := message.Check(rec); err != nil {
		return neutral{}, err
	}
	v := message.View(rec)
	nm := neutral{value: v.Body(), bornMs: v.BornTimestamp(), storeMs: v.StoreTimestamp()}
	if sf := v.SysFlag(); sf&message.FlagCompressed != 0 {
		var err error
		switch sf & message.FlagCompressMask {
		case 0, 0x300:
			nm.value, err = inflateZlib(nm.value, limit)
		case 0x100:
			nm.value, err = inflate(codecLZ4, nm.value, limit)
		case 0x200:
			nm.value, err = inflate(codecZstd, nm.value, limit)
		default:
			err = fmt.Errorf("%w: RocketMQ compression type %#x", ErrMalformed, sf&message.FlagCompressMask)
		}
		if err != nil {
			return neutral{}, err
		}
	}
	nm.key, nm.headers = rocketMQHeaders(v.Properties())
	return nm, nil
}

// rocketMQHeaders splits encoded properties as the clients read them
// (items with exactly one \x01; a later item overrides an earlier one of
// the same name) into KEYS and the other properties in stored order
// (a repeated name at its first place, with its last value). Values alias
// props.
func rocketMQHeaders(props []byte) (key []byte, hs []Header) {
	n := bytes.Count(props, []byte{message.PropertySeparator}) + 1
	hs = make([]Header, 0, n)
	var seen map[string]int // index in hs, past a few properties
	if n > 8 {
		seen = make(map[string]int, n)
	}
	for len(props) > 0 {
		item := props
		if i := bytes.IndexByte(props, message.PropertySeparator); i >= 0 {
			item, props = props[:i], props[i+1:]
		} else {
			props = nil
		}
		sep := bytes.IndexByte(item, message.NameValueSeparator)
		if sep < 0 || bytes.IndexByte(item[sep+1:], message.NameValueSeparator) >= 0 {
			continue
		}
		name, value := item[:sep], item[sep+1:len(item):len(item)]
		if string(name) == message.PropKeys {
			key = value
			continue
		}
		at := -1
		if seen != nil {
			if j, ok := seen[string(name)]; ok {
				at = j
			}
		} else {
			for j := range hs {
				if hs[j].Key == string(name) {
					at = j
				}
			}
		}
		if at >= 0 {
			hs[at].Value = value // the last value, at the first place
			continue
		}
		if seen != nil {
			seen[string(name)] = len(hs)
		}
		hs = append(hs, Header{Key: string(name), Value: value})
	}
	if len(key) == 0 {
		key = nil
	}
	return key, hs
}

// AMQP records.

// amqpBody splits the body of an AMQP record: exchange, routing key,
// raw properties and message body (the layout internal/amqp writes:
// EXCHANGELEN 1, EXCHANGE, KEYLEN 1, ROUTINGKEY, PROPSLEN 4, PROPS, BODY).
func amqpBody(b []byte) (exchange, routingKey string, props, body []byte, err error) {
	r := amqpReader{b: b}
	exchange = r.shortStr()
	routingKey = r.shortStr()
	props = r.longStr()
	if r.err != nil {
		return "", "", nil, nil, fmt.Errorf("%w: AMQP record: %v", ErrMalformed, r.err)
	}
	return exchange, routingKey, props, r.b, nil
}

// amqpRecordProps returns the raw properties of an AMQP record's body
// (laid out as amqpBody reads it), stepping over its exchange and routing
// key without copying them.
func amqpRecordProps(b []byte) ([]byte, error) {
	r := amqpReader{b: b}
	r.take(int(r.u8())) // exchange
	r.take(int(r.u8())) // routing key
	props := r.longStr()
	if r.err != nil {
		return nil, fmt.Errorf("%w: AMQP record: %v", ErrMalformed, r.err)
	}
	return props, nil
}

// neutralOfAMQP maps an AMQP message (see the package documentation).
func neutralOfAMQP(e record.Envelope) (neutral, error) {
	if n := e.Messages(); n > 1 {
		// An AMQP transaction's messages, read only by the AMQP door.
		return neutral{}, fmt.Errorf("translate: an AMQP record of %d messages (a transaction) is not converted", n)
	}
	exchange, rk, raw, body, err := amqpBody(e.Body())
	if err != nil {
		return neutral{}, err
	}
	p, err := ParseAMQPProperties(raw)
	if err != nil {
		return neutral{}, err
	}
	nm := neutral{value: body, storeMs: e.StoreTimestamp(), bornMs: int64(min(p.Timestamp, 1<<53)) * 1000}
	if p.Has&flagMessageID != 0 && p.MessageID != "" {
		nm.key = []byte(p.MessageID)
	}
	h := make([]Header, 0, len(p.Headers)+12)
	str := func(bit uint16, name, v string) {
		if p.Has&bit != 0 {
			h = append(h, Header{Key: name, Value: []byte(v)})
		}
	}
	str(flagContentType, PropContentType, p.ContentType)
	str(flagContentEncoding, PropContentEncoding, p.ContentEncoding)
	str(flagDeliveryMode, PropAMQPDeliveryMode, strconv.Itoa(int(p.DeliveryMode)))
	str(flagPriority, PropAMQPPriority, strconv.Itoa(int(p.Priority)))
	str(flagCorrelationID, PropCorrelationID, p.CorrelationID)
	str(flagReplyTo, PropAMQPReplyTo, p.ReplyTo)
	str(flagExpiration, PropAMQPExpiration, p.Expiration)
	str(flagType, PropAMQPType, p.Type)
	str(flagUserID, PropAMQPUserID, p.UserID)
	str(flagAppID, PropAMQPAppID, p.AppID)
	str(flagClusterID, PropAMQPClusterID, p.ClusterID)
	h = append(h, Header{Key: PropAMQPExchange, Value: []byte(exchange)}, Header{Key: PropAMQPRoutingKey, Value: []byte(rk)})
	nm.headers = append(h, p.Headers...)
	return nm, nil
}

// AMQP conversion.

// AMQPMessage is a delivery's content converted from another format.
type AMQPMessage struct {
	RoutingKey string
	Props      []byte // raw content properties
	Body       []byte
}

// EachAMQP converts rec, a RocketMQ message or a Kafka batch, into AMQP
// messages (one per Kafka record) and calls fn with each; fn's slices
// must not be kept. The routing key is the message's AMQP_ROUTING_KEY
// property if it has one, else topic.
func EachAMQP(rec []byte, topic string, limit int, fn func(*AMQPMessage) error) error {
	t, err := record.TypeOf(rec)
	if err != nil {
		return err
	}
	one := func(nm *neutral) error {
		m := AMQPMessage{RoutingKey: topic, Body: nm.value}
		var p AMQPProperties
		amqpPropertiesOf(nm, &p, &m.RoutingKey)
		m.Props = AppendAMQPProperties(nil, &p)
		return fn(&m)
	}
	switch t {
	case record.RocketMQ:
		nm, err := neutralOfRocketMQ(rec, limit)
		if err != nil {
			return err
		}
		return one(&nm)
	case record.KafkaBatch:
		if err := record.CheckEnvelope(rec); err != nil {
			return err
		}
		return EachKafkaRecord(record.Envelope(rec).Body(), limit, func(r *KafkaRecord) error {
			nm := neutral{key: r.Key, value: r.Value, headers: r.Headers, bornMs: r.Timestamp}
			return one(&nm)
		})
	}
	return fmt.Errorf("translate: a %v is not converted for AMQP consumers", t)
}

// amqpPropertiesOf maps nm onto AMQP properties: the AMQP-named headers
// onto their properties, the key onto message-id, the born time onto
// timestamp (seconds), delivery-mode 2 (persistent: it is stored) unless
// a header says otherwise, every other header into the headers table as
// a long string.
func amqpPropertiesOf(nm *neutral, p *AMQPProperties, routingKey *string) {
	p.Has = flagDeliveryMode
	p.DeliveryMode = 2
	if len(nm.key) > 0 && len(nm.key) <= 255 {
		p.Has |= flagMessageID
		p.MessageID = string(nm.key)
	}
	if nm.bornMs > 0 {
		p.Has |= flagTimestamp
		p.Timestamp = uint64(nm.bornMs / 1000)
	}
	set := func(bit uint16, dst *string, v []byte) {
		if len(v) <= 255 {
			p.Has |= bit
			*dst = string(v)
		}
	}
	for _, h := range nm.headers {
		switch h.Key {
		case PropContentType:
			set(flagContentType, &p.ContentType, h.Value)
		case PropContentEncoding:
			set(flagContentEncoding, &p.ContentEncoding, h.Value)
		case PropCorrelationID:
			set(flagCorrelationID, &p.CorrelationID, h.Value)
		case PropAMQPReplyTo:
			set(flagReplyTo, &p.ReplyTo, h.Value)
		case PropAMQPExpiration:
			set(flagExpiration, &p.Expiration, h.Value)
		case PropAMQPType:
			set(flagType, &p.Type, h.Value)
		case PropAMQPUserID:
			set(flagUserID, &p.UserID, h.Value)
		case PropAMQPAppID:
			set(flagAppID, &p.AppID, h.Value)
		case PropAMQPClusterID:
			set(flagClusterID, &p.ClusterID, h.Value)
		case PropAMQPDeliveryMode, PropAMQPPriority:
			v, err := strconv.ParseUint(string(h.Value), 10, 8)
			if err != nil {
				break
			}
			if h.Key == PropAMQPPriority {
				p.Has |= flagPriority
				p.Priority = uint8(v)
			} else {
				p.DeliveryMode = uint8(v)
			}
		case PropAMQPRoutingKey:
			if len(h.Value) <= 255 {
				*routingKey = string(h.Value)
			}
		case PropAMQPExchange:
		default:
			if len(h.Key) > 0 && len(h.Key) <= 255 {
				v := h.Value
				if v == nil {
					v = []byte{}
				}
				p.Headers = append(p.Headers, Header{Key: h.Key, Value: v})
			}
		}
	}
}

// QueueOffset returns the queue offset a stored record has in queue
// (topic, queueID): a RocketMQ message's QUEUEOFFSET, an enveloped
// record's destination; ok false if the record does not say.
func QueueOffset(rec []byte, topic string, queueID int32) (int64, bool) {
	t, err := record.TypeOf(rec)
	switch {
	case err != nil:
	case t == record.RocketMQ:
		if message.Check(rec) == nil {
			return message.View(rec).QueueOffset(), true
		}
	case t.Enveloped():
		if record.CheckEnvelope(rec) == nil {
			if qo, err := envelopeDest(record.Envelope(rec), topic, queueID); err == nil {
				return qo, true
			}
		}
	}
	return 0, false
}

// StoreTimestamp returns the store time (ms) of a stored record of any
// type, 0 if it does not parse.
func StoreTimestamp(rec []byte) int64 {
	t, err := record.TypeOf(rec)
	switch {
	case err != nil:
	case t == record.RocketMQ:
		if message.Check(rec) == nil {
			return message.View(rec).StoreTimestamp()
		}
	case t.Enveloped():
		if record.CheckEnvelope(rec) == nil {
			return record.Envelope(rec).StoreTimestamp()
		}
	}
	return 0
}
