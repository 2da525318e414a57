package metrics

// rocketmq-exporter's names and labels, so that a Grafana dashboard (10477,
// "RocketMQ Exporter Overview") or alert rules written for RocketMQ work on
// Keel unchanged. Enabled by Config.RocketMQNames; always beside Keel's own
// names, never instead of them. docs/metrics.md maps each one to Keel's.
//
// Label sets are the exporter's: cluster, broker (and brokerIP), topic,
// group; rocketmq_group_diff and its retry and DLQ siblings carry group,
// topic, countOfOnlineConsumers and msgModel (0 BROADCASTING, 1
// CLUSTERING, Java's enum order) and no cluster or broker, as the exporter
// writes them. Values follow the exporter's meaning: the _tps and
// _message_size gauges are per-second rates over the last minute (Keel
// derives them from its counters, sampled at scrape time), offsets are sums
// over a topic's queues on this broker, latencies are milliseconds.

import (
	"strconv"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

var (
	cBrokerTPS       = desc("rocketmq_broker_tps", "Messages stored per second by the broker over the last minute (rocketmq-exporter BrokerPutNums).", "cluster", "brokerIP", "broker")
	cBrokerQPS       = desc("rocketmq_broker_qps", "Messages read per second from the broker over the last minute (rocketmq-exporter BrokerGetNums).", "cluster", "brokerIP", "broker")
	cProducerTPS     = desc("rocketmq_producer_tps", "Messages stored per second in a topic over the last minute (rocketmq-exporter TopicPutNums).", "cluster", "broker", "topic")
	cProducerSize    = desc("rocketmq_producer_message_size", "Body bytes sent per second to a topic over the last minute (rocketmq-exporter TopicPutMessageSize).", "cluster", "broker", "topic")
	cProducerOffset  = desc("rocketmq_producer_offset", "Sum of a topic's queue max offsets (rocketmq-exporter TopicOffset).", "cluster", "broker", "topic")
	cRetryOffset     = desc("rocketmq_topic_retry_offset", "Sum of a retry topic's queue max offsets (rocketmq-exporter TopicRetryOffset).", "cluster", "broker", "topic")
	cDLQOffset       = desc("rocketmq_topic_dlq_offset", "Sum of a group's dead-letter topic queue max offsets (rocketmq-exporter).", "cluster", "broker", "group")
	cConsumerOffset  = desc("rocketmq_consumer_offset", "Sum of a group's committed offsets on a topic (rocketmq-exporter GroupBrokerTotalOffset).", "cluster", "broker", "topic", "group")
	cConsumerSize    = desc("rocketmq_consumer_message_size", "Bytes consumed per second by a group from a topic over the last minute, estimated as rocketmq_consumer_tps times the topic's mean body size (rocketmq-exporter GroupGetMessageSize).", "cluster", "broker", "topic", "group")
	cConsumerTPS     = desc("rocketmq_consumer_tps", "Messages consumed per second by a group from a topic over the last minute (Keel: committed-offset rate; rocketmq-exporter GroupGetNums).", "cluster", "broker", "topic", "group")
	cGroupConsumeTPS = desc("rocketmq_group_consume_tps", "Consume TPS of GET_CONSUME_STATS: committed-offset rate over the last minute (rocketmq-exporter GroupConsumeTPS).", "cluster", "broker", "topic", "group")
	cLatencyByStore  = desc("rocketmq_group_get_latency_by_storetime", "Milliseconds since the oldest unconsumed message of a group on a topic was stored; 0 when caught up (rocketmq-exporter GroupGetLatencyByStoreTime).", "cluster", "broker", "topic", "group")
	cGroupDiff       = desc("rocketmq_group_diff", "Messages a group has not consumed on a topic (rocketmq-exporter GroupDiff).", "group", "topic", "countOfOnlineConsumers", "msgModel")
	cGroupRetryDiff  = desc("rocketmq_group_retrydiff", "Messages a group has not consumed on its retry topic (rocketmq-exporter GroupRetryDiff).", "group", "topic", "countOfOnlineConsumers", "msgModel")
	cGroupDLQDiff    = desc("rocketmq_group_dlqdiff", "Messages a group has not consumed on its dead-letter topic (rocketmq-exporter GroupDLQDiff).", "group", "topic", "countOfOnlineConsumers", "msgModel")
)

var compatDescs = []*prometheus.Desc{
	cBrokerTPS, cBrokerQPS, cProducerTPS, cProducerSize, cProducerOffset, cRetryOffset, cDLQOffset,
	cConsumerOffset, cConsumerTPS, cConsumerSize, cGroupConsumeTPS, cLatencyByStore, cGroupDiff, cGroupRetryDiff, cGroupDLQDiff,
}

// msgModelOrdinal is Java's MessageModel ordinal, as the exporter writes it.
func msgModelOrdinal(model string) string {
	if model == "BROADCASTING" {
		return "0"
	}
	return "1" // CLUSTERING, also for a group with no member online
}

func (c *collector) collectCompat(ch chan<- prometheus.Metric, b *broker.Broker, groups []*groupTopic) {
	m := c.m
	now := m.now()
	m.rates.begin(now)
	defer m.rates.end()
	cluster, name, addr := b.Identity()
	s := b.Store().Stats()
	gauge(ch, cBrokerTPS, m.rates.rate("put", float64(s.PutMessages)), cluster, addr, name)
	gauge(ch, cBrokerQPS, m.rates.rate("get", float64(s.GetMessages)), cluster, addr, name)

	sentBytes := counterValues(m.sendBytes, nil)
	sentMsgs := counterValues(m.sendMessages, func(result string) bool { return result == "SUCCESS" })
	for _, tc := range b.Topics() {
		t := tc.TopicName
		total, _, _ := queueTotals(b, t)
		switch {
		case strings.HasPrefix(t, broker.RetryTopic("")):
			gauge(ch, cRetryOffset, float64(total), cluster, name, t)
		case strings.HasPrefix(t, broker.DLQTopic("")):
			gauge(ch, cDLQOffset, float64(total), cluster, name, strings.TrimPrefix(t, broker.DLQTopic("")))
		default:
			gauge(ch, cProducerOffset, float64(total), cluster, name, t)
			gauge(ch, cProducerTPS, m.rates.rate("put/"+t, float64(total)), cluster, name, t)
			gauge(ch, cProducerSize, m.rates.rate("bytes/"+t, sentBytes[t]), cluster, name, t)
		}
	}
	online := map[string][2]string{}
	for _, g := range groups {
		om, ok := online[g.group]
		if !ok {
			n, model := b.GroupMembers(g.group)
			om = [2]string{strconv.Itoa(n), msgModelOrdinal(model)}
			online[g.group] = om
		}
		diff := cGroupDiff
		switch {
		case strings.HasPrefix(g.topic, broker.RetryTopic("")):
			diff = cGroupRetryDiff
		case strings.HasPrefix(g.topic, broker.DLQTopic("")):
			diff = cGroupDLQDiff
		}
		gauge(ch, diff, float64(g.lag), g.group, g.topic, om[0], om[1])
		gauge(ch, cConsumerOffset, float64(g.offset), cluster, name, g.topic, g.group)
		tps := m.rates.rate("consumed/"+g.group+"\x00"+g.topic, float64(g.offset))
		gauge(ch, cConsumerTPS, tps, cluster, name, g.topic, g.group)
		gauge(ch, cGroupConsumeTPS, tps, cluster, name, g.topic, g.group)
		var meanBody float64
		if n := sentMsgs[g.topic]; n > 0 {
			meanBody = sentBytes[g.topic] / n
		}
		gauge(ch, cConsumerSize, tps*meanBody, cluster, name, g.topic, g.group)
		if !g.ageUnknown {
			gauge(ch, cLatencyByStore, g.ageSeconds(now)*1000, cluster, name, g.topic, g.group)
		}
	}
}

// counterValues reads a counter vector labelled by topic (and, if
// result is not nil, by a result it must accept) into topic -> value.
func counterValues(v *prometheus.CounterVec, result func(string) bool) map[string]float64 {
	out := map[string]float64{}
	ch := make(chan prometheus.Metric, 64)
	go func() { v.Collect(ch); close(ch) }()
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil || pb.Counter == nil {
			continue
		}
		topic, ok := "", result == nil
		for _, l := range pb.Label {
			switch l.GetName() {
			case "topic":
				topic = l.GetValue()
			case "result":
				ok = result != nil && result(l.GetValue())
			}
		}
		if ok {
			out[topic] += pb.Counter.GetValue()
		}
	}
	return out
}

// rateWindow is one counter's samples, oldest first: the rate is measured
// from the newest sample at least rateWindowSpan old (or the oldest kept).
type rateWindow struct {
	at   []time.Time
	v    []float64
	seen uint64 // the scrape that last read it
}

// rateWindowSpan is the span of the per-second gauges (RocketMQ's
// per-minute statistics).
const rateWindowSpan = time.Minute

// rateWindows keeps the samples of every rate the compatible gauges show.
// Used only under the collector's scrapeMu.
type rateWindows struct {
	now   time.Time
	scrap uint64
	m     map[string]*rateWindow
}

func (r *rateWindows) begin(now time.Time) {
	if r.m == nil {
		r.m = map[string]*rateWindow{}
	}
	r.now = now
	r.scrap++
}

// end forgets the counters this scrape did not read (deleted topics and
// groups).
func (r *rateWindows) end() {
	for k, w := range r.m {
		if w.seen != r.scrap {
			delete(r.m, k)
		}
	}
}

// rate records v for key and returns its per-second increase over about
// the last rateWindowSpan (0 until there are two samples, and after a
// counter went down).
func (r *rateWindows) rate(key string, v float64) float64 {
	w := r.m[key]
	if w == nil {
		w = &rateWindow{}
		r.m[key] = w
	}
	w.seen = r.scrap
	// Keep one sample at or before the span's start as the baseline.
	for len(w.at) > 1 && r.now.Sub(w.at[1]) >= rateWindowSpan {
		w.at, w.v = w.at[1:], w.v[1:]
	}
	out := 0.0
	if len(w.at) > 0 {
		if dt := r.now.Sub(w.at[0]).Seconds(); dt > 0 && v >= w.v[0] {
			out = (v - w.v[0]) / dt
		}
	}
	if n := len(w.at); n == 0 || r.now.Sub(w.at[n-1]) >= time.Second {
		w.at, w.v = append(w.at, r.now), append(w.v, v)
	}
	return out
}
