package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// spreadACLA is broker-a's plain_acl.yml: operator1 is an admin there.
const spreadACLA = `accounts:
  - accessKey: admin001
    secretKey: admin-secret
    admin: true
  - accessKey: operator1
    secretKey: ops-secret
    admin: true
`

// spreadACLB is broker-b's: operator1 is an account without admin rights.
const spreadACLB = `accounts:
  - accessKey: admin001
    secretKey: admin-secret
    admin: true
  - accessKey: operator1
    secretKey: ops-secret
`

// TestKafkaSpreadUnderACL: two broker groups as processes, each a master
// with aclEnable=true and a plain_acl.yml of its own. kadm's CreateTopics
// as admin001 (an admin on both) through broker-a spreads 4 partitions
// over both groups (2 queues each); as operator1 (an admin on broker-a only)
// it is refused with TOPIC_AUTHORIZATION_FAILED, broker-a's share undone,
// no queue left on either group. CreatePartitions of the spread topic,
// whose new queues go to broker-b, is refused for operator1 alike (no queue
// added) and done for admin001.
func TestKafkaSpreadUnderACL(t *testing.T) {
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	nsAddr := ns.await(t, "the NameServer to listen", listenRE)
	dir := t.TempDir()
	kafkaAddrs := make([]string, 2)
	var brokerLogs []*syncBuffer
	for i, name := range []string{"broker-a", "broker-b"} {
		aclFile := filepath.Join(dir, name+"-acl.yml")
		if err := os.WriteFile(aclFile, []byte([]string{spreadACLA, spreadACLB}[i]), 0o600); err != nil {
			t.Fatal(err)
		}
		conf := "brokerClusterName=c\nbrokerName=" + name + "\nbrokerRole=ASYNC_MASTER\nbrokerId=0\nmapedFileSizeCommitLog=16777216\n" +
			"autoCreateTopicEnable=false\naclEnable=true\naclFile=" + aclFile + "\nkafkaNodeId=" + strconv.Itoa(1+10*i) + "\n"
		_, logs := startBrokerProc(t, "-n", nsAddr, "-c", writeConf(t, conf), "--data-dir", filepath.Join(dir, name),
			"--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--http-listen", "", "--amqp-listen", "", "--kafka-listen", "127.0.0.1:0")
		kafkaAddrs[i] = awaitLog(t, name+"'s Kafka listener", logs, kafkaListenRE)
		brokerLogs = append(brokerLogs, logs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	as := func(user, pass string) (*kgo.Client, *kadm.Client) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs[0]), kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()),
			kgo.MetadataMinAge(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl, kadm.NewClient(cl)
	}
	admCl, adm := as("admin001", "admin-secret")
	_, ops := as("operator1", "ops-secret")
	last := ""
	defer func() {
		if t.Failed() {
			t.Logf("last broker metadata: %s", last)
			if nc, err := remoting.Dial(context.Background(), nsAddr, remoting.ClientConfig{}); err == nil {
				kc, err := namesrv.GetKafkaCluster(context.Background(), nc, "c")
				t.Logf("the NameServer's Kafka cluster: %+v %v", kc, err)
				nc.Close()
			}
			for i, l := range brokerLogs {
				t.Logf("broker %d log:\n%s", i, l.String())
			}
		}
	}()
	waitFor(t, "both masters in the Kafka cluster", 30*time.Second, func() bool {
		md, err := brokerMetadata(ctx, admCl)
		if err == nil {
			last = fmt.Sprintf("brokers %+v controller %d", md.Brokers, md.ControllerID)
		} else {
			last = err.Error()
		}
		return err == nil && len(md.Brokers) == 2
	})
	ac := admin.New(admin.Config{NamesrvAddrs: []string{nsAddr}, AccessKey: "admin001", SecretKey: "admin-secret"})
	defer ac.Close()
	// absent: a topic no group hosts (the NameServer has no route).
	absent := func(topic string) bool {
		_, err := ac.Topic(ctx, topic)
		return err != nil && strings.Contains(err.Error(), "not found: topic")
	}

	if r, err := adm.CreateTopic(ctx, 4, -1, nil, "spread"); err != nil || r.Err != nil || r.NumPartitions != 4 {
		t.Fatalf("create spread as admin001: %+v %v", r, err)
	}
	if q := topicQueues(t, ac, "spread"); !sameQueues(q, map[string]int32{"broker-a": 2, "broker-b": 2}) {
		t.Fatalf("spread's queues: %v, want 2 on each group", q)
	}

	r, err := ops.CreateTopic(ctx, 4, -1, nil, "refused") // err is r.Err
	if !errors.Is(err, kerr.TopicAuthorizationFailed) || !errors.Is(r.Err, kerr.TopicAuthorizationFailed) || !strings.Contains(r.ErrMessage, "broker-b") {
		t.Errorf("create refused as operator1: %+v %v, want TOPIC_AUTHORIZATION_FAILED naming broker-b", r, err)
	}
	if !absent("refused") {
		t.Errorf("a refused topic left queues: %v", topicQueues(t, ac, "refused"))
	}

	// kadm gives an authorization failure as the error of the call.
	if rs, err := ops.CreatePartitions(ctx, 2, "spread"); !errors.Is(err, kerr.TopicAuthorizationFailed) && !errors.Is(rs["spread"].Err, kerr.TopicAuthorizationFailed) {
		t.Errorf("CreatePartitions of spread as operator1: %+v %v, want TOPIC_AUTHORIZATION_FAILED", rs, err)
	}
	if q := topicQueues(t, ac, "spread"); !sameQueues(q, map[string]int32{"broker-a": 2, "broker-b": 2}) {
		t.Errorf("spread's queues after a refused CreatePartitions: %v", q)
	}
	if rs, err := adm.CreatePartitions(ctx, 2, "spread"); err != nil || rs["spread"].Err != nil {
		t.Fatalf("CreatePartitions of spread as admin001: %+v %v", rs, err)
	}
	if q := topicQueues(t, ac, "spread"); !sameQueues(q, map[string]int32{"broker-a": 2, "broker-b": 4}) {
		t.Errorf("spread's queues after CreatePartitions to 6: %v, want broker-b's 4", q)
	}
}
