package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

const kafkaAdminACL = `accounts:
  - accessKey: admin001
    secretKey: admin-secret
    admin: true
  - accessKey: writer01
    secretKey: writer-secret
    topicPerms: [orders=SUB]
`

// TestServeKafkaACLsAndQuotas: against keel serve with aclEnable=true, a
// Kafka admin's CreateAcls rewrites the real plain_acl.yml and an
// AlterClientQuotas writes config/kafkaQuotas.json; after a restart both
// are read back.
func TestServeKafkaACLsAndQuotas(t *testing.T) {
	tmp := t.TempDir()
	aclFile := filepath.Join(tmp, "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(kafkaAdminACL), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := writeConf(t, "mapedFileSizeCommitLog=16777216\naclEnable=true\naclFile="+aclFile+"\n")
	data := filepath.Join(tmp, "data")
	serve := func() (string, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		logs := &syncBuffer{}
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"serve", "-c", conf, "--data-dir", data, "--namesrv-listen", "127.0.0.1:0",
				"--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--http-listen", ""}, &bytes.Buffer{}, logs)
		}()
		var addr string
		waitFor(t, "the Kafka listener", 30*time.Second, func() bool {
			if m := kafkaListenRE.FindStringSubmatch(logs.String()); m != nil {
				addr = m[1]
			}
			return addr != ""
		})
		return addr, func() { cancel(); <-done }
	}
	admin := func(addr string) *kadm.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(plain.Auth{User: "admin001", Pass: "admin-secret"}.AsMechanism()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return kadm.NewClient(cl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	addr, stop := serve()
	adm := admin(addr)
	cs, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("orders").Allow("User:writer01").Operations(kadm.OpWrite))
	if err != nil || len(cs) != 1 || cs[0].Err != nil {
		t.Fatalf("create: %v %+v", err, cs)
	}
	client := "metered"
	rs, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &client}},
		Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1 << 20}}}})
	if err != nil || len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("quota: %v %+v", err, rs)
	}
	if b, err := os.ReadFile(aclFile); err != nil || !strings.Contains(string(b), "'orders=PUB|SUB'") {
		t.Fatalf("plain_acl.yml: %v\n%s", err, b)
	}
	if _, err := os.Stat(filepath.Join(data, "config", "kafkaQuotas.json")); err != nil {
		t.Fatal(err)
	}
	stop()

	addr, stop = serve()
	defer stop()
	adm = admin(addr)
	ds, err := adm.DescribeACLs(ctx, kadm.NewACLs().Topics("orders").Allow("User:writer01").AllowHosts().Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil || len(ds) != 1 || len(ds[0].Described) != 1 {
		t.Fatalf("describe after a restart: %v %+v", err, ds)
	}
	qs, err := adm.DescribeClientQuotas(ctx, false, nil)
	if err != nil || len(qs) != 1 || qs[0].Values[0].Value != 1<<20 {
		t.Fatalf("quotas after a restart: %v %+v", err, qs)
	}
}
