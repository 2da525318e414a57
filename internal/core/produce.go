package core

// The produce path: what a send must pass before it is stored, and where
// the message goes. Every front door calls these in this order:
//
//	CheckSend       broker and topic write permission, topic name, topics
//	                only the broker writes (ErrForbidden), auto-creation
//	                from the template topic, the queue (negative = a random
//	                writable one), maxMessageSize on the body (a batch
//	                counts as a whole) -> ErrMessageIllegal
//	PrepareMessage  a retry-topic message over its group's maxReconsumeTimes
//	                goes to %DLQ%<group>; a broker-made UNIQ_KEY when the
//	                client gave none; the CLUSTER property; properties of at
//	                most 32767 bytes
//	Deduplicator    (client UNIQ_KEY, hook installed) the original's result
//	                for a re-send, checked by the front door (hooks.go);
//	                a batch item by item with CheckBatchDuplicates
//	Route           a prepared transaction message to the Transactions
//	                engine, DELAY / TIMER_* to the Scheduler (hooks.go);
//	                otherwise the caller stores the message itself, as the
//	                RocketMQ adapter does to defer its answer to the group
//	                commit (PutRouted stores and waits instead)
//
// Batches: CheckBatch refuses retry topics and, item by item, delay and
// transaction properties. Nothing here keeps a message or its Body after
// returning: the RocketMQ adapter reuses the request's frame buffer.

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// maxTimerDelay bounds TIMER_* delivery times (RocketMQ timerMaxDelaySec).
const maxTimerDelay = 3 * 24 * time.Hour

// CheckSend validates a client's send to topic and returns the queue it
// goes to. template and templateQueues name the topic to create an
// unknown one from (the producer's defaultTopic and its queue count);
// bodyBytes is the request's body length (a batch counts as a whole).
func (b *Broker) CheckSend(topic, template string, templateQueues, queueID int32, bodyBytes int) (int32, error) {
	if b.cfg.BrokerPermission&PermWrite == 0 {
		return 0, Errorf(ErrForbidden, "the broker[%s] sending message is forbidden", b.cfg.BrokerName)
	}
	if _, ok := b.topics.get(topic); !ok { // an existing topic's name was checked when it was created
		if err := ValidateTopic(topic); err != nil {
			return 0, err
		}
	}
	if !IsSendable(topic) {
		return 0, Errorf(ErrForbidden, "sending message to topic[%s] is forbidden", topic)
	}
	tc, err := b.AutoCreateTopic(topic, template, templateQueues)
	if err != nil {
		return 0, err
	}
	if !tc.Writable() {
		return 0, Errorf(ErrForbidden, "the topic[%s] sending is forbidden", topic)
	}
	if queueID < 0 {
		if tc.WriteQueueNums < 1 {
			return 0, Errorf(ErrForbidden, "the topic[%s] has no writable queue", topic)
		}
		queueID = rand.Int32N(tc.WriteQueueNums)
	} else if queueID >= tc.QueueNums() {
		return 0, Errorf(ErrInvalidArgument, "queueId[%d] is illegal, topic:[%s] topicConfig.writeQueueNums:[%d]",
			queueID, topic, tc.WriteQueueNums)
	}
	if bodyBytes > b.cfg.MaxMessageSize {
		return 0, Errorf(ErrMessageIllegal, "message body size %d exceeds the limit of %d bytes (maxMessageSize)",
			bodyBytes, b.cfg.MaxMessageSize)
	}
	return queueID, nil
}

// PrepareMessage readies a checked single message for Route: a retry-topic
// message that exhausted its reconsume times (maxReconsumeTimes when
// hasMaxReconsume, else its group's retryMaxTimes) is redirected to the
// group's dead-letter topic, the message gets a UNIQ_KEY (the broker's
// own unless the client gave one: clientKey) and the CLUSTER property.
func (b *Broker) PrepareMessage(m *message.Message, maxReconsumeTimes int32, hasMaxReconsume bool) (uniq string, clientKey bool, err error) {
	if IsRetryTopic(m.Topic) {
		if err := b.retryToDLQ(m, maxReconsumeTimes, hasMaxReconsume); err != nil {
			return "", false, err
		}
	}
	uniq, ok := message.Property(m.Properties, message.PropUniqKey)
	clientKey = ok && uniq != ""
	if clientKey {
		m.Properties = message.SetProperty(m.Properties, message.PropCluster, b.cfg.ClusterName)
	} else {
		uniq = b.uniq.Next()
		m.Properties = message.SetProperties(m.Properties, message.PropUniqKey, uniq, message.PropCluster, b.cfg.ClusterName)
	}
	if len(m.Properties) > message.MaxPropertiesBytes {
		return "", false, Errorf(ErrMessageIllegal, "message properties length %d exceeds the limit of %d bytes",
			len(m.Properties), message.MaxPropertiesBytes)
	}
	return uniq, clientKey, nil
}

// CheckBatch refuses a batch to a retry topic.
func CheckBatch(topic string) error {
	if IsRetryTopic(topic) {
		return Errorf(ErrMessageIllegal, "batch request does not support retry group %s", topic)
	}
	return nil
}

// CheckBatchItem refuses a batch item with delay or transaction
// properties.
func CheckBatchItem(props string) error {
	for _, k := range []string{message.PropDelayLevel, message.PropTimerDeliverMs, message.PropTimerDelaySec,
		message.PropTimerDelayMs, message.PropTransactionPrepared} {
		if v, ok := message.Property(props, k); ok && v != "" && v != "0" && v != "false" {
			return Errorf(ErrMessageIllegal, "batch message does not support the %s property", k)
		}
	}
	return nil
}

// Route stores m as a half message or as a scheduled message (routed);
// a message for its topic directly is left to the caller to put.
func (b *Broker) Route(ctx context.Context, m *message.Message) (res store.PutResult, routed bool, err error) {
	if v, _ := message.Property(m.Properties, message.PropTransactionPrepared); v == "true" {
		t := b.Transactions()
		if t == nil {
			return store.PutResult{}, false, Errorf(ErrForbidden,
				"the broker[%s] sending transaction message is forbidden: transactions are not enabled", b.cfg.BrokerName)
		}
		return t.Prepare(ctx, m), true, nil
	}
	level, at, err := b.delayOf(m)
	if err != nil {
		return store.PutResult{}, false, err
	}
	if level == 0 && at == 0 {
		return store.PutResult{}, false, nil
	}
	s := b.Scheduler()
	if s == nil {
		if IsRetryTopic(m.Topic) {
			m.Properties = message.DeleteProperty(m.Properties, message.PropDelayLevel)
			return store.PutResult{}, false, nil
		}
		return store.PutResult{}, false, Errorf(ErrMessageIllegal, "scheduled delivery is not enabled on this broker")
	}
	if level > s.MaxDelayLevel() {
		level = s.MaxDelayLevel()
		m.Properties = message.SetProperty(m.Properties, message.PropDelayLevel, itoa(level))
	}
	return s.Schedule(ctx, m, level, at), true, nil
}

// PutRouted routes m and stores it, waiting for the result.
func (b *Broker) PutRouted(ctx context.Context, m *message.Message) (store.PutResult, error) {
	res, routed, err := b.Route(ctx, m)
	if err != nil || routed {
		return res, err
	}
	return b.st.PutMessage(ctx, m), nil
}

// delayOf reads DELAY (a level) or the TIMER_* properties (a timestamp) of a
// message. DELAY wins; the timer properties are then removed. A timer in the
// past means "now" (0, 0).
func (b *Broker) delayOf(m *message.Message) (level int32, deliverAtMs int64, err error) {
	if v, ok := message.Property(m.Properties, message.PropDelayLevel); ok && v != "" {
		n, perr := strconv.ParseInt(v, 10, 32)
		if perr != nil {
			return 0, 0, Errorf(ErrMessageIllegal, "illegal DELAY property %q", v)
		}
		if n > 0 {
			for _, k := range []string{message.PropTimerDeliverMs, message.PropTimerDelaySec, message.PropTimerDelayMs} {
				m.Properties = message.DeleteProperty(m.Properties, k)
			}
			return int32(n), 0, nil
		}
	}
	now := b.cfg.Now().UnixMilli()
	at, ok, err := timerDeliverMs(m.Properties, now)
	if err != nil || !ok || at <= now {
		return 0, 0, err
	}
	if at-now > maxTimerDelay.Milliseconds() {
		return 0, 0, Errorf(ErrMessageIllegal, "timer message delivery time is more than %s ahead", maxTimerDelay)
	}
	return 0, at, nil
}

// timerPropPrefix starts the name of each of the timer properties, which
// most messages carry none of.
const timerPropPrefix = "TIMER_"

func timerDeliverMs(props string, nowMs int64) (int64, bool, error) {
	if !strings.Contains(props, timerPropPrefix) {
		return 0, false, nil // one search instead of a scan of props per key
	}
	keys := []struct {
		key   string
		scale int64
		rel   bool
	}{{message.PropTimerDeliverMs, 1, false}, {message.PropTimerDelaySec, 1000, true}, {message.PropTimerDelayMs, 1, true}}
	for _, k := range keys {
		v, ok := message.Property(props, k.key)
		if !ok || v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, false, Errorf(ErrMessageIllegal, "illegal %s property %q", k.key, v)
		}
		if !k.rel {
			return n, true, nil // absolute; the caller bounds it
		}
		if n > maxTimerDelay.Milliseconds()/k.scale {
			return 0, false, Errorf(ErrMessageIllegal,
				"timer message delivery time is more than %s ahead", maxTimerDelay)
		}
		return nowMs + n*k.scale, true, nil
	}
	return 0, false, nil
}

// retryToDLQ sends a retry-topic message that exhausted its reconsume times
// to the group's dead-letter topic (the Go client's retry-as-normal path).
func (b *Broker) retryToDLQ(m *message.Message, maxReconsumeTimes int32, hasMaxReconsume bool) error {
	group := RetryGroup(m.Topic)
	g, err := b.EnsureGroup(group)
	if err != nil {
		return err
	}
	maxTimes := g.RetryMaxTimes
	if hasMaxReconsume {
		maxTimes = maxReconsumeTimes
	}
	if m.ReconsumeTimes <= maxTimes {
		return nil
	}
	dlq := DLQTopic(group)
	if err := ValidateTopic(dlq); err != nil {
		return err
	}
	if _, err := b.EnsureTopic(dlq, 1, PermRW); err != nil {
		return err
	}
	m.Topic, m.QueueID = dlq, 0
	m.Properties = message.DeleteProperty(m.Properties, message.PropDelayLevel)
	return nil
}
