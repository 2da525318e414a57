package amqp

// What the broker's operators see of the AMQP side: Server.Queues and
// Server.Exchanges are snapshots for `keel amqp queues`, the console and
// /metrics (through cmd/keel's wiring: this package imports none of them).

import (
	"sort"

	"github.com/keelmq/keel/internal/amqpinfo"

	"github.com/keelmq/keel/internal/store"
)

// QueueInfo is a snapshot of one queue. Counters count since the broker
// started.
type QueueInfo = amqpinfo.Queue

// ExchangeInfo is a snapshot of one exchange.
type ExchangeInfo = amqpinfo.Exchange

// Queues returns every queue, by vhost and name.
func (s *Server) Queues() []QueueInfo {
	now := nowMs()
	var out []QueueInfo
	for _, v := range s.vhosts {
		for _, q := range v.all() {
			out = append(out, q.info(now))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Vhost < out[j].Vhost || out[i].Vhost == out[j].Vhost && out[i].Name < out[j].Name
	})
	return out
}

func (q *queue) info(now int64) QueueInfo {
	i := QueueInfo{Vhost: q.v.name, Name: q.name, Topic: q.topic, Type: q.a.queueType, Durable: q.durable, Exclusive: q.owner != nil,
		AutoDelete: q.autoDelete, MessageTTLMs: q.a.ttl, MaxLength: q.a.maxLen, DeliveryLimit: q.a.deliveryLimit,
		Published: q.stats.published.Load(), Delivered: q.stats.delivered.Load(), Redelivered: q.stats.redelivered.Load(),
		Acked: q.stats.acked.Load(), DeadLettered: q.stats.deadLettered.Load(), Dropped: q.stats.dropped.Load(),
		Refused: q.stats.refused.Load(), OldestUnsettledAgeMs: -1}
	if q.a.hasDLX {
		i.DeadLetterExchange = q.a.dlx
		if i.DeadLetterExchange == "" {
			i.DeadLetterExchange = "(default)"
		}
	}
	q.mu.Lock()
	i.Ready, i.Unacked, i.Consumers = max(0, q.readyLocked()), int64(len(q.inflight)-q.dying), len(q.consumers)
	if q.isStream() {
		i.Unacked = q.streamUnackedLocked() // stream.go
	}
	floor := q.floor
	q.mu.Unlock()
	st := q.v.srv.store
	if floor < st.MaxOffset(q.topic, queueID) && !q.isStream() { // a stream has nothing unsettled
		if r, err := st.GetMessage(q.topic, queueID, floor, 1, 0, nil); err == nil {
			if r.Status == store.Found && len(r.Records) == 1 {
				if m, err := parseMessage(r.Records[0], q.topic, floor); err == nil {
					i.OldestUnsettledAgeMs = max(0, now-m.storeTs)
				}
			}
			r.Release()
		}
	}
	return i
}

// Exchanges returns every exchange, by vhost and name.
func (s *Server) Exchanges() []ExchangeInfo {
	var out []ExchangeInfo
	for _, v := range s.vhosts {
		v.mu.Lock()
		for _, e := range v.exchanges {
			out = append(out, ExchangeInfo{Vhost: v.name, Name: e.name, Type: e.kind, Durable: e.durable,
				AutoDelete: e.autoDelete, Internal: e.internal, Bindings: len(e.bindings)})
		}
		v.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Vhost < out[j].Vhost || out[i].Vhost == out[j].Vhost && out[i].Name < out[j].Name
	})
	return out
}
