// Package metrics exports Keel's Prometheus metrics. It is the only package
// that imports the Prometheus client; the broker and the store expose
// narrow hooks instead:
//
//   - event counters and histograms are fed through broker.Observer
//     (OnSend, OnPull, installed by New) and ObserveFlush (the store's
//     flush hook);
//   - gauges are read at scrape time from snapshots (broker.Stats,
//     broker.ConsumeProgress, store.Stats, offsets, disk usage, the
//     transaction engine's Stats, the request budget's and the listeners'
//     figures of NetLimitStats), by a prometheus.Collector, so an idle
//     broker does no metrics work.
//
// Sends and deliveries of every front door (broker.Observer, and the Kafka
// and AMQP doors' observers) share series with a door label; each
// listener's doorstats counters are read by door. cmd/keel/http.go serves
// the registry with /healthz, /readyz and the console on --http-listen.
// NewController is a controller voter's registry (controller.go: raft
// state, elections, fences, time without a master, from
// controller.Stats), served by keel controller --http-listen.
//
// Names follow Prometheus conventions (keel_..._total for counters,
// _seconds and _bytes units) and are listed in docs/metrics.md. With
// Config.RocketMQNames, rocketmq-exporter's names and labels are exported
// beside them (compat.go), so existing RocketMQ dashboards and alert rules
// work; their per-second rates are sampled every 10 s as RocketMQ's minute
// statistics (rates.go). docs/metrics.md lists every metric and alert rule
// (tests check).
//
// Recent (recent.go) estimates p50 and p99 of the send and flush latency
// over the last minutes from the histograms; RuntimeInfo renders it for
// the broker's GET_BROKER_RUNTIME_INFO, where the console reads it.
//
// Cardinality: topic labels come from real topics (they exist on the
// broker); group labels from real consumer groups; queue labels from queue
// ids. Per-queue lag series are limited by Config.MaxLagSeries (the rest is
// still summed into the per-group totals).
//
// Concurrency: all methods are safe for concurrent use; the Observer
// methods are cheap (a labelled counter increment) and never block.
package metrics
