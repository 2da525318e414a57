package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSlaveLogsItsDoors: a SLAVE says what each door does on it: the
// RocketMQ door serves reads and refuses sends; a Kafka door asked for by
// a flag is off, as a warning naming the key and the reason; an AMQP door
// left at its default is off, said at INFO.
func TestSlaveLogsItsDoors(t *testing.T) {
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	namesrv := ns.await(t, "the NameServer to listen", listenRE)
	conf := writeConf(t, "brokerClusterName=c\nbrokerName=broker-a\nmapedFileSizeCommitLog=16777216\n"+
		"brokerRole=SLAVE\nbrokerId=1\nhaMasterAddress=127.0.0.1:1\n")
	slave := startRun(t, "broker", "-n", namesrv, "-c", conf, "--data-dir", filepath.Join(t.TempDir(), "slave"),
		"--broker-listen", "127.0.0.1:0", "--http-listen", "", "--kafka-listen", "127.0.0.1:0")
	slave.await(t, "the slave's broker listener", brokerListenRE)
	logs := slave.logs.String()
	for _, re := range []string{
		`level=INFO msg="broker door on a SLAVE: serves pulls, queries and admin reads; sends are refused \(SERVICE_NOT_AVAILABLE`,
		`level=WARN msg="kafka door off on a SLAVE: Kafka clients produce and commit offsets, which a replica cannot take; clients connect to the master's kafkaListen" door=kafka kafkaListen=127\.0\.0\.1:0 role=SLAVE`,
		`level=INFO msg="amqp door off on a SLAVE: .*" door=amqp amqpListen=127\.0\.0\.1:5672`,
	} {
		if !regexp.MustCompile(re).MatchString(logs) {
			t.Errorf("the slave's log lacks %s:\n%s", re, logs)
		}
	}
	if strings.Contains(logs, `msg="Kafka listening"`) || strings.Contains(logs, `msg="amqp listening"`) {
		t.Errorf("a door listens on the slave:\n%s", logs)
	}
}
