package main

import (
	"strings"
	"testing"
	"time"
)

// metricsRocketMQNames=true in broker.conf adds rocketmq-exporter's names
// to /metrics; the broker reports Keel's version and its recent latency to
// the console.
func TestServeRocketMQMetricNamesAndRuntimeInfo(t *testing.T) {
	c := startClusterWith(t, "metricsRocketMQNames=true\n")
	base := c.httpBase()
	c.ok("topic", "create", "Web", "--queues", "1")
	c.ok("msg", "send", "--topic", "Web", "--body", "hello")
	waitFor(t, "the send in rocketmq_producer_offset", 10*time.Second, func() bool {
		_, body := httpGet(t, base+"/metrics")
		return strings.Contains(body, `rocketmq_producer_offset{broker="broker-a",cluster="DefaultCluster",topic="Web"} 1`)
	})
	_, body := httpGet(t, base+"/metrics")
	for _, want := range []string{"rocketmq_broker_tps{", `keel_topic_messages{topic="Web"} 1`, `keel_topics{kind="normal"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	_, overview := httpGet(t, base+"/api/overview")
	for _, want := range []string{`"keelVersion": "` + version + `"`, `"brokerVersionDesc": "V4_9_4"`, `"keelSendCount": "`, `"keelFlushLatencyP99Ms": "`} {
		if !strings.Contains(overview, want) {
			t.Errorf("/api/overview lacks %q:\n%s", want, overview)
		}
	}
}

// Without the key, /metrics has Keel's names only.
func TestServeMetricsKeelNamesByDefault(t *testing.T) {
	c := startCluster(t)
	base := c.httpBase()
	_, body := httpGet(t, base+"/metrics")
	if !strings.Contains(body, "keel_topics{") || strings.Contains(body, "rocketmq_") {
		t.Errorf("default /metrics: keel_topics present %v, rocketmq_ present %v",
			strings.Contains(body, "keel_topics{"), strings.Contains(body, "rocketmq_"))
	}
}
