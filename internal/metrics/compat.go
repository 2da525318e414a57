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
	cluster, name, addr := b.Identity()
	gauge(ch, cBrokerTPS, m.stats.rate(rateBrokerPut), cluster, addr, name)
	gauge(ch, cBrokerQPS, m.stats.rate(rateBrokerGet), cluster, addr, name)

	sentBytes := counterValues(m.sendBytes, nil)
	sentMsgs := counterValues(m.sendMessages, storedResult)
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
			gauge(ch, cProducerTPS, m.stats.rate(rateTopicPut+t), cluster, name, t)
			gauge(ch, cProducerSize, m.stats.rate(rateTopicBytes+t), cluster, name, t)
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
		tps := m.stats.rate(consumedKey(g.group, g.topic))
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
