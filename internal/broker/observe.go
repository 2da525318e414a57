package broker

// Observation hooks for metrics. The broker never imports a metrics
// library: an Observer installed with SetObserver is told about every send
// and pull request as it ends, and Stats returns a snapshot of gauges for a
// collector to read at scrape time. Observer methods run on the request's
// goroutine and must be cheap and never block.

import (
	"strings"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// Observer receives request events.
type Observer interface {
	// OnSend reports a send request (single or batch) that ended: its
	// topic, the messages stored (0 unless the result is SUCCESS or
	// FLUSH_DISK_TIMEOUT), the body bytes received, the response code name
	// and the time from receipt to response.
	OnSend(topic string, msgs, bytes int, result string, d time.Duration)
	// OnPull reports a pull answered now (result is the response code name)
	// or held for long polling (result "HELD"); a held pull answered later
	// is not reported again.
	OnPull(topic, group, result string)
}

// DeliveryObserver is what an Observer may also implement to be told of
// every pull answered with messages: the topic and the records delivered.
type DeliveryObserver interface {
	OnDeliver(topic string, msgs int)
}

type observerBox struct{ o Observer }

// SetObserver installs o (nil removes it).
func (b *Broker) SetObserver(o Observer) {
	if o == nil {
		b.observer.Store(nil)
		return
	}
	b.observer.Store(&observerBox{o})
}

func (b *Broker) getObserver() Observer {
	if box := b.observer.Load(); box != nil {
		return box.o
	}
	return nil
}

// observeSend reports a finished send request to the Observer.
// bodyLen is the request's body length (the body itself may be gone).
func (b *Broker) observeSend(req, resp *remoting.Command, bodyLen int, start time.Time) {
	o := b.getObserver()
	if o == nil || resp == nil {
		return
	}
	k := remoting.SendKeys(req.Code)
	msgs := 0
	if resp.Code == remoting.ResSuccess || resp.Code == remoting.ResFlushDiskTimeout {
		if ids := resp.Ext("msgId"); ids != "" {
			msgs = strings.Count(ids, ",") + 1
		}
	}
	o.OnSend(req.Ext(k[remoting.SendTopic]), msgs, bodyLen, remoting.ResponseCode(resp.Code).String(), time.Since(start))
}

// observePull reports a pull request to the Observer (no response and no
// error: held).
func (b *Broker) observePull(req, resp *remoting.Command, err error) {
	o := b.getObserver()
	if o == nil {
		return
	}
	result := "HELD"
	code, _, known := errorCode(err)
	switch {
	case known:
		result = remoting.ResponseCode(code).String()
	case err != nil:
		result = remoting.ResponseCode(remoting.ResSystemError).String()
	case resp != nil:
		result = remoting.ResponseCode(resp.Code).String()
	}
	o.OnPull(req.Ext("topic"), req.Ext("consumerGroup"), result)
}

// observeDeliver reports msgs records a pull delivered from topic.
func (b *Broker) observeDeliver(topic string, msgs int) {
	if d, ok := b.getObserver().(DeliveryObserver); ok && msgs > 0 {
		d.OnDeliver(topic, msgs)
	}
}

// Stats is a snapshot of the broker's gauges.
type Stats struct {
	HeldPulls       int // pull requests held for long polling
	ProducerClients int // producer registrations (group, client)
	ConsumerClients int // consumer members (group, client), Kafka group members included
	OnlineGroups    int // consumer groups with a member online, Kafka groups included
	Topics          int
	// TopicsByKind splits Topics by message.KindOfTopic: user topics,
	// retry, dead-letter and system topics (every kind present, maybe 0).
	TopicsByKind       map[message.TopicKind]int
	SubscriptionGroups int
	// LastRegistered is when a NameServer last accepted the broker's
	// registration (zero: never).
	LastRegistered time.Time
}

// Registered reports whether a NameServer accepted the broker's
// registration within the broker's ChannelExpiredTimeout, after which a
// NameServer drops a silent broker. A broker without NameServers is
// always registered.
func (b *Broker) Registered() bool {
	if len(b.cfg.NamesrvAddrs) == 0 {
		return true
	}
	ms := b.reg.lastOK.Load()
	return ms > 0 && b.cfg.Now().Sub(time.UnixMilli(ms)) < b.cfg.ChannelExpiredTimeout
}

// Stats returns the broker's current gauges.
func (b *Broker) Stats() Stats {
	topics, _ := b.core.TopicTable()
	groups, _ := b.core.GroupTable()
	s := Stats{HeldPulls: b.pulls.held(), Topics: len(topics), SubscriptionGroups: len(groups),
		TopicsByKind: make(map[message.TopicKind]int, len(message.TopicKinds))}
	for _, k := range message.TopicKinds {
		s.TopicsByKind[k] = 0 // every kind is reported, also when none exists
	}
	for name := range topics {
		s.TopicsByKind[message.KindOfTopic(name)]++
	}
	s.OnlineGroups, s.ConsumerClients = b.core.Consumers().Counts()
	if h := b.kafka.Load(); h != nil && h.Counts != nil { // a Kafka group's members (admin_kafka.go)
		g, m := h.Counts()
		s.OnlineGroups, s.ConsumerClients = s.OnlineGroups+g, s.ConsumerClients+m
	}
	s.ProducerClients = b.core.Producers().Count()
	if ms := b.reg.lastOK.Load(); ms > 0 {
		s.LastRegistered = time.UnixMilli(ms)
	}
	return s
}
