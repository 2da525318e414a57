package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/broker"
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
	// Connections returns the number of open client connections.
	Connections func() int
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
	// Now is the clock of ages and rates (time.Now).
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
	flushLatency prometheus.Histogram
	flushBytes   prometheus.Histogram

	scrapeMu sync.Mutex // one collection at a time (they read many offsets)
	recent   recentState
	rates    rateWindows // of the RocketMQ-compatible per-second gauges; guarded by scrapeMu
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
	m := &Metrics{cfg: cfg, reg: prometheus.NewRegistry(), recent: recentState{start: time.Now()}}
	m.sendRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keel_send_requests_total", Help: "Send requests (single or batch) by topic and response code.",
	}, []string{"topic", "result"})
	m.sendMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keel_send_messages_total",
		Help: "Messages of send requests by topic and response code (stored messages on success; a failed batch counts as one).",
	}, []string{"topic", "result"})
	m.sendBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keel_send_bytes_total", Help: "Body bytes of successful send requests by topic.",
	}, []string{"topic"})
	m.sendLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "keel_send_latency_seconds",
		Help:    "Time from receiving a send request to answering it, by outcome (ok or error).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"outcome"})
	m.pullRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keel_pull_requests_total", Help: "Pull requests by consumer group and result (FOUND..., HELD for long polling).",
	}, []string{"group", "result"})
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
	m.reg.MustRegister(m.sendRequests, m.sendMessages, m.sendBytes, m.sendLatency, m.pullRequests,
		m.flushLatency, m.flushBytes, &collector{m: m}, &integrityCollector{m: m})
	if cfg.IncludeGoMetrics {
		m.reg.MustRegister(collectors.NewGoCollector(), processCollector())
	}
	if cfg.Broker != nil {
		cfg.Broker.SetObserver(observer{m})
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

// observer adapts Metrics to broker.Observer.
type observer struct{ m *Metrics }

// OtherTopic labels sends to topics the broker does not have (so a client
// naming random topics cannot create unbounded series).
const OtherTopic = "_other"

func (o observer) OnSend(topic string, msgs, bytes int, result string, d time.Duration) {
	m := o.m
	if b := m.cfg.Broker; b != nil {
		if _, ok := b.Topic(topic); !ok {
			topic = OtherTopic
		}
	}
	m.sendRequests.WithLabelValues(topic, result).Inc()
	outcome := "error"
	if msgs > 0 {
		outcome = "ok"
		m.sendMessages.WithLabelValues(topic, result).Add(float64(msgs))
		m.sendBytes.WithLabelValues(topic).Add(float64(bytes))
	} else {
		m.sendMessages.WithLabelValues(topic, result).Inc()
	}
	m.sendLatency.WithLabelValues(outcome).Observe(d.Seconds())
}

func (o observer) OnPull(topic, group, result string) {
	o.m.pullRequests.WithLabelValues(group, result).Inc()
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
