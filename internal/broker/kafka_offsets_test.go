package broker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

func kafkaOffsets(cl *client, group, topic, op string, body *KafkaOffsets) *remoting.Command {
	var data []byte
	if body != nil {
		data, _ = json.Marshal(body)
	}
	return cl.invoke(remoting.ReqKafkaGroupOffsets, map[string]string{"consumerGroup": group, "topic": topic, "op": op}, data)
}

// TestKafkaGroupOffsets: KEEL_KAFKA_GROUP_OFFSETS commits a group's
// offsets of a topic's queues and answers once they are in the offsets
// file (the flush interval is an hour here), reads them back per topic
// and for every topic, drops them; a queue beyond the topic's, a
// negative offset, an unknown topic or op are refused with nothing
// applied; a slave refuses it.
func TestKafkaGroupOffsets(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.OffsetFlushInterval = time.Hour })
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	wantCode(t, cl.sendV1("U", 0, "", []byte("x")), remoting.ResSuccess)
	tc, _ := e.b.core.Topic("T")

	wantCode(t, kafkaOffsets(cl, "g", "T", "commit", &KafkaOffsets{Offsets: map[string]int64{"0": 5, "1": 7}}), remoting.ResSuccess)
	data, err := os.ReadFile(filepath.Join(e.dir, "config", "consumerOffset.json"))
	if err != nil || !strings.Contains(string(data), `"T@g":{"0":5,"1":7}`) {
		t.Fatalf("offsets file after the commit's answer: %v %s", err, data)
	}
	wantCode(t, kafkaOffsets(cl, "g", "U", "commit", &KafkaOffsets{Offsets: map[string]int64{"2": 1}}), remoting.ResSuccess)

	for _, bad := range []struct {
		topic string
		body  KafkaOffsets
		code  int16
	}{
		{"T", KafkaOffsets{Offsets: map[string]int64{"0": 9, itoa(tc.ReadQueueNums): 1}}, remoting.ResInvalidParameter},
		{"T", KafkaOffsets{Offsets: map[string]int64{"0": 9, "1": -1}}, remoting.ResInvalidParameter},
		{"T", KafkaOffsets{Offsets: map[string]int64{"x": 9}}, remoting.ResInvalidParameter},
		{"Nope", KafkaOffsets{Offsets: map[string]int64{"0": 9}}, remoting.ResTopicNotExist},
	} {
		wantCode(t, kafkaOffsets(cl, "g", bad.topic, "commit", &bad.body), bad.code)
	}
	if off, _ := e.b.core.ConsumerOffset("g", "T", 0, false); off != 5 {
		t.Fatalf("a refused commit moved queue 0 to %d", off)
	}
	wantCode(t, kafkaOffsets(cl, "g", "T", "rewind", nil), remoting.ResInvalidParameter)

	fetch := func(topic string) map[string]map[string]int64 {
		t.Helper()
		resp := kafkaOffsets(cl, "g", topic, "fetch", nil)
		wantCode(t, resp, remoting.ResSuccess)
		var out KafkaOffsets
		if err := json.Unmarshal(resp.Body, &out); err != nil {
			t.Fatal(err)
		}
		return out.Topics
	}
	if got := fetch("T"); len(got) != 1 || got["T"]["0"] != 5 || got["T"]["1"] != 7 || len(got["T"]) != 2 {
		t.Fatalf("fetch T: %v", got)
	}
	if got := fetch(""); len(got) != 2 || got["U"]["2"] != 1 || got["T"]["1"] != 7 {
		t.Fatalf("fetch all: %v", got)
	}

	wantCode(t, kafkaOffsets(cl, "g", "T", "delete", &KafkaOffsets{Queues: []int32{1}}), remoting.ResSuccess)
	if got := fetch("T"); len(got["T"]) != 1 || got["T"]["0"] != 5 {
		t.Fatalf("fetch T after deleting queue 1: %v", got)
	}
	data, _ = os.ReadFile(filepath.Join(e.dir, "config", "consumerOffset.json"))
	if !strings.Contains(string(data), `"T@g":{"0":5}`) {
		t.Fatalf("offsets file after the delete's answer: %s", data)
	}

	s := startEnv(t, func(c *Config) { c.BrokerID = 1 })
	scl := s.dial()
	wantCode(t, kafkaOffsets(scl, "g", "T", "fetch", nil), remoting.ResSlaveNotAvailable)
}
