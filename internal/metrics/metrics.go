package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/doorstats"
	"github.com/keelmq/keel/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultMaxLagSeries bounds the per-queue consumer lag series of a scrape.
const DefaultMaxLagSeries = 10000

// TransactionStats is what the transaction engine reports.
type TransactionStats struct {
	Pending                                 int   // undecided half messages
	Prepared, Committed, RolledBack, Checks int64 // counters
}

// Sources are the parts the metrics read at scrape time. Nil fields are
// skipped (their metrics are absent).
type Sources struct {
	Broker *broker.Broker
	Store  *store.Store
	// Doors returns every front door's traffic counters (doors.go):
	// connections, requests, errors and bytes by door.
	Doors func() []doorstats.Snapshot
	// DiskUsage returns the total and free bytes of the store's filesystem.
	DiskUsage func() (total, free uint64, err error)
	// Transactions returns the transaction engine's counters.
	Transactions func() TransactionStats
	// Replication returns the replication state of a group member
	// (replication.go); nil for a broker outside a group.
	Replication func() ReplicationStats
	// AMQP returns the AMQP front door's queues (amqp.go).
	AMQP func() []AMQPQueueStats
	// NetLimits returns the request budget's and the listeners' figures
	// (netlimit.go).
	NetLimits func() NetLimitStats
	// Controlled returns a broker's side of controller mode
	// (controller.go); nil outside controller mode.
	Controlled func() ControlledStats
}

// Config configures Metrics.
type Config struct {
	Sources
	MaxLagSeries int // per-queue lag series per scrape (DefaultMaxLagSeries)
	// IncludeGoMetrics adds the Go runtime and process collectors.
	IncludeGoMetrics bool
	// RocketMQNames adds rocketmq-exporter's metric names and labels
	// (compat.go) beside Keel's own, for existing dashboards and alerts.
	RocketMQNames bool
	// Now is the clock of ages and of the rates' samples (time.Now).
	Now func() time.Time
}

// Metrics owns a registry with Keel's metrics.
type Metrics struct {
	cfg Config
	reg *prometheus.Registry

	sendRequests *prometheus.CounterVec
	sendMessages *prometheus.CounterVec
	sendBytes    *prometheus.CounterVec
	sendLatency  *prometheus.HistogramVec
	pullRequests *prometheus.CounterVec
	delivered    *prometheus.CounterVec
	flushLatency prometheus.Histogram
	flushBytes   prometheus.Histogram

	// The series one kind of send counts in, looked up in the vectors
	// once (a vector's look-up hashes every label value: four per send
	// were a few per cent of the broker's CPU at high send rates). Series
	// are never deleted, so a cached one stays the vector's.
	sendMu     sync.RWMutex
	sendSeries map[sendKey]*sendSeries

	scrapeMu sync.Mutex // one collection at a time (they read many offsets)
	recent   recentState
	stats    statsMinute // the samples of the RocketMQ-compatible per-second gauges (rates.go)
}

// New builds the metrics and, when cfg.Broker is set, installs itself as the
// broker's Observer.
func New(cfg Config) *Metrics {
	if cfg.MaxLagSeries <= 0 {
		cfg.MaxLagSeries = DefaultMaxLagSeries
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Metrics{cfg: cfg, reg: prometheus.NewRegistry(), recent: recentState{start: time.Now()}, sendSeries: map[sendKey]*sendSeries{}}
	m.sendRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keel_send_requests_total",
		Help: "Send requests (RocketMQ single or batch sends, Kafka produced partitions, AMQP publishes) by front door, topic and result.",
	}, []string{"door", "topic", "result"})
	m.sendMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keel_send_messages_total",
		Help: "Messages of send requests by front door, topic and result (stored messages on success; a failed request counts as one).",
	}, []string{"door", "topic", "result"})
	m.sendBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keel_send_bytes_total", Help: "Body bytes of successful send requests by front door and topic (Kafka: record batch bytes).",
	}, []string{"door", "topic"})
	m.sendLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "keel_send_latency_seconds",
		Help:    "Time from receiving a send request to answering it, by front door and outcome (ok or error).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"door", "outcome"})
	m.pullRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keel_pull_requests_total", Help: "Pull requests by consumer group and result (FOUND..., HELD for long polling).",
	}, []string{"group", "result"})
	m.delivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keel_deliver_messages_total",
		Help: "Messages delivered to consumers by front door and topic (RocketMQ pulls, Kafka fetches, AMQP deliveries and basic.get).",
	}, []string{"door", "topic"})
	m.flushLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "keel_store_flush_latency_seconds",
		Help:    "Duration of CommitLog fdatasync rounds (group commit).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	})
	m.flushBytes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "keel_store_flush_batch_bytes",
		Help:    "Bytes made durable by one CommitLog fdatasync round (group-commit batch size).",
		Buckets: prometheus.ExponentialBuckets(256, 4, 10),
	})
	m.reg.MustRegister(m.sendRequests, m.sendMessages, m.sendBytes, m.sendLatency, m.pullRequests, m.delivered,
		m.flushLatency, m.flushBytes, &collector{m: m}, &integrityCollector{m: m})
	if cfg.IncludeGoMetrics {
		m.reg.MustRegister(collectors.NewGoCollector(), processCollector())
	}
	if cfg.Broker != nil {
		cfg.Broker.SetObserver(observer{m.Door(doorstats.RocketMQ)})
	}
	return m
}

func (m *Metrics) now() time.Time { return m.cfg.Now() }

// Registry is the registry holding the metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ObserveFlush records one CommitLog fdatasync round (the store's flush
// hook).
func (m *Metrics) ObserveFlush(d time.Duration, bytes int64) {
	m.flushLatency.Observe(d.Seconds())
	m.flushBytes.Observe(float64(bytes))
}

// observer adapts a DoorObserver to broker.Observer.
type observer struct{ DoorObserver }

func (o observer) OnPull(topic, group, result string) {
	o.m.pullRequests.WithLabelValues(group, result).Inc()
}

// OtherTopic labels sends to topics the broker does not have (so a client
// naming random topics cannot create unbounded series).
const OtherTopic = "_other"

// DoorObserver counts one front door's sends and deliveries in the shared
// series (its door label); the Kafka and AMQP doors take it as their
// Observer, and the broker's Observer is one.
type DoorObserver struct {
	m    *Metrics
	door string
}

// Door is the observer of the front door named door (doorstats.Kafka, ...).
func (m *Metrics) Door(door string) DoorObserver { return DoorObserver{m: m, door: door} }

// topicLabel is topic, or OtherTopic for one the broker does not have.
func (o DoorObserver) topicLabel(topic string) string {
	if b := o.m.cfg.Broker; b != nil {
		if _, ok := b.Topic(topic); !ok {
			return OtherTopic
		}
	}
	return topic
}

// OnSend counts a send request: the messages stored (0 for a failure), the
// body bytes, the result and the time from receipt to answer.
func (o DoorObserver) OnSend(topic string, msgs, bytes int, result string, d time.Duration) {
	s := o.m.sendSeriesOf(sendKey{o.door, o.topicLabel(topic), result, msgs > 0})
	s.requests.Inc()
	if msgs > 0 {
		s.messages.Add(float64(msgs))
		s.bytes.Add(float64(bytes))
	} else {
		s.messages.Inc()
	}
	s.latency.Observe(d.Seconds())
}

// sendKey is one kind of send: its labels, and whether it stored messages
// (which picks the latency series, "ok" or "error").
type sendKey struct {
	door, topic, result string
	stored              bool
}

// sendSeries are the series a kind of send counts in (bytes only for
// sends that stored messages, so that no other send makes its series).
type sendSeries struct {
	requests, messages, bytes prometheus.Counter
	latency                   prometheus.Observer
}

// sendSeriesOf returns k's series, made on its first send.
func (m *Metrics) sendSeriesOf(k sendKey) *sendSeries {
	m.sendMu.RLock()
	s := m.sendSeries[k]
	m.sendMu.RUnlock()
	if s != nil {
		return s
	}
	outcome := "error"
	s = &sendSeries{
		requests: m.sendRequests.WithLabelValues(k.door, k.topic, k.result),
		messages: m.sendMessages.WithLabelValues(k.door, k.topic, k.result),
	}
	if k.stored {
		outcome = "ok"
		s.bytes = m.sendBytes.WithLabelValues(k.door, k.topic)
	}
	s.latency = m.sendLatency.WithLabelValues(k.door, outcome)
	m.sendMu.Lock()
	if old := m.sendSeries[k]; old != nil {
		s = old
	} else {
		m.sendSeries[k] = s
	}
	m.sendMu.Unlock()
	return s
}

// OnDeliver counts msgs messages delivered from topic.
func (o DoorObserver) OnDeliver(topic string, msgs int) {
	if msgs > 0 {
		o.m.delivered.WithLabelValues(o.door, o.topicLabel(topic)).Add(float64(msgs))
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
