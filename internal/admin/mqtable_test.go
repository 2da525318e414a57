package admin

import (
	"testing"
)

func TestDecodeMQTable(t *testing.T) {
	body := []byte(` {"consumeTps":0.0, "offsetTable":{{"brokerName":"b-1","queueId":0,"topic":"%RETRY%g"}:{"brokerOffset":10,"consumerOffset":7,"lastTimestamp":5},` +
		`{"brokerName":"b-1","queueId":1,"topic":"T{x}:\"y\""} : {"brokerOffset":3,"consumerOffset":3,"lastTimestamp":0}}}`)
	table, err := decodeMQTable[wireOffsetWrapper](body, "offsetTable")
	if err != nil {
		t.Fatal(err)
	}
	if len(table) != 2 {
		t.Fatalf("%d entries: %+v", len(table), table)
	}
	if w := table[MessageQueue{Topic: "%RETRY%g", BrokerName: "b-1", QueueID: 0}]; w.BrokerOffset != 10 || w.ConsumerOffset != 7 || w.LastTimestamp != 5 {
		t.Errorf("entry 0: %+v", w)
	}
	if w, ok := table[MessageQueue{Topic: `T{x}:"y"`, BrokerName: "b-1", QueueID: 1}]; !ok || w.BrokerOffset != 3 {
		t.Errorf("entry 1 (braces and quotes in a string): %+v %v", w, ok)
	}
	// Keys written as JSON strings holding the object, and empty tables.
	table, err = decodeMQTable[wireOffsetWrapper]([]byte(`{"offsetTable":{"{\"topic\":\"T\",\"queueId\":2}":{"brokerOffset":1}}}`), "offsetTable")
	if err != nil || table[MessageQueue{Topic: "T", QueueID: 2}].BrokerOffset != 1 {
		t.Errorf("string key: %v %+v", err, table)
	}
	for _, b := range []string{`{"offsetTable":{}}`, `{}`, `{"offsetTable":null}`} {
		if table, err := decodeMQTable[wireOffsetWrapper]([]byte(b), "offsetTable"); err != nil || len(table) != 0 {
			t.Errorf("%s: %v %v", b, table, err)
		}
	}
	for _, b := range []string{``, `{`, `{"offsetTable":{{"topic":"T"}}}`, `{"offsetTable":{{"topic":"T"}:}}`,
		`{"offsetTable":{{"topic":"T"}:{"brokerOffset":"x"}}}`, `{"offsetTable":{{"topic":"T}:{}}}`, `[1,2]`} {
		if _, err := decodeMQTable[wireOffsetWrapper]([]byte(b), "offsetTable"); err == nil {
			t.Errorf("%q: no error", b)
		}
	}
}

func TestBrokerAddrs(t *testing.T) {
	for _, raw := range []string{`{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"}`, `{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}`} {
		m, err := brokerAddrs([]byte(raw))
		if err != nil || len(m) != 2 || m[0] != "10.0.0.1:10911" || m[1] != "10.0.0.2:10911" {
			t.Errorf("%s: %v %v", raw, m, err)
		}
	}
	if _, err := brokerAddrs([]byte(`{"x":"a"}`)); err == nil {
		t.Error("non-numeric broker id accepted")
	}
}

func FuzzDecodeMQTable(f *testing.F) {
	f.Add([]byte(`{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"minOffset":0,"maxOffset":3}}}`))
	f.Add([]byte(`{"offsetTable":{"{}":{}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeMQTable[wireTopicOffset](b, "offsetTable") // must not panic or hang
	})
}

func TestPermAndKinds(t *testing.T) {
	for s, want := range map[string]int32{"rw": 6, "R": 4, "w": 2, "none": 0, "7": 7} {
		if p, err := ParsePerm(s); err != nil || p != want {
			t.Errorf("ParsePerm(%q) = %d, %v", s, p, err)
		}
	}
	for _, s := range []string{"rwx", "8", "-1", ""} {
		if _, err := ParsePerm(s); err == nil {
			t.Errorf("ParsePerm(%q) accepted", s)
		}
	}
	if PermString(6) != "RW" || PermString(4) != "R-" || PermString(0) != "--" {
		t.Error("PermString")
	}
	for name, kind := range map[string]string{"T": KindNormal, "%RETRY%g": KindRetry, "%DLQ%g": KindDLQ, "TBW102": KindSystem,
		"RMQ_SYS_TRANS_HALF_TOPIC": KindSystem, "KEEL_SYS_TIMER": KindSystem} {
		if TopicKind(name) != kind {
			t.Errorf("TopicKind(%q) = %q", name, TopicKind(name))
		}
	}
}

func TestResendProperties(t *testing.T) {
	old := map[string]string{"KEYS": "k1 k2", "TAGS": "t", "UNIQ_KEY": "U", "RETRY_TOPIC": "T", "DELAY": "3",
		"REAL_TOPIC": "x", "ORIGIN_MESSAGE_ID": "O", "user": "v", PropResendTimes: "2", "CLUSTER": "c"}
	p := resendPropertiesMap(old)
	for k, v := range map[string]string{"KEYS": "k1 k2", "TAGS": "t", "ORIGIN_MESSAGE_ID": "O", "user": "v",
		PropResendTimes: "3", "WAIT": "true"} {
		if p[k] != v {
			t.Errorf("%s = %q, want %q", k, p[k], v)
		}
	}
	for _, k := range []string{"RETRY_TOPIC", "DELAY", "REAL_TOPIC", "CLUSTER"} {
		if _, ok := p[k]; ok {
			t.Errorf("%s kept", k)
		}
	}
	delete(old, "ORIGIN_MESSAGE_ID")
	if p := resendPropertiesMap(old); p["ORIGIN_MESSAGE_ID"] != "U" {
		t.Errorf("ORIGIN_MESSAGE_ID %q, want the dead letter's unique key", p["ORIGIN_MESSAGE_ID"])
	}
}
