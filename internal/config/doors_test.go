package config

import (
	"strings"
	"testing"
)

func TestDeriveDoorPorts(t *testing.T) {
	for _, tt := range []struct {
		conf              string
		http, amqp, kafka string
		err               string
	}{
		{"", DefaultHTTPListen, DefaultAMQPListen, DefaultKafkaListen, ""},
		{"listenPort=10911\n", DefaultHTTPListen, DefaultAMQPListen, DefaultKafkaListen, ""},
		{"listenPort=0\n", DefaultHTTPListen, DefaultAMQPListen, DefaultKafkaListen, ""},
		// A second member of the host: every door moves with listenPort.
		{"listenPort=11011\n", "127.0.0.1:8180", "127.0.0.1:5772", "127.0.0.1:9192", ""},
		// What the file sets stays, even when it equals the default.
		{"listenPort=11011\nhttpListen=127.0.0.1:8080\nkafkaListen=\n", "127.0.0.1:8080", "127.0.0.1:5772", "", ""},
		{"listenPort=1000\n", "", "", "", "at port -1831, outside 1..65535: set httpListen"},
	} {
		b, _, err := Parse([]byte(tt.conf), "broker.conf")
		if err != nil {
			t.Fatal(err)
		}
		err = b.DeriveDoorPorts()
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %v, want an error with %q", tt.conf, err, tt.err)
			}
			continue
		}
		if err != nil || b.HTTPListen != tt.http || b.AMQPListen != tt.amqp || b.KafkaListen != tt.kafka {
			t.Errorf("%q: http %q amqp %q kafka %q (%v); want %q %q %q", tt.conf, b.HTTPListen, b.AMQPListen, b.KafkaListen, err, tt.http, tt.amqp, tt.kafka)
		}
	}
}
