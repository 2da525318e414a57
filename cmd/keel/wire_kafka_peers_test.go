package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/kafka"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/testcluster"
)

const peersACL = `
accounts:
  - accessKey: consumer1
    secretKey: consumer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [orders=SUB]
    groupPerms: [billing=SUB]
  - accessKey: others1
    secretKey: other-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [orders=SUB]
  - accessKey: admin01
    secretKey: admin-secret
    admin: true
`

// TestKafkaPeersSignAsTheClient: with access control on the other
// master, a forwarded commit made for an authenticated client is signed
// as that client's account and passes the client's permissions there;
// one for an account without the group's permission, or unsigned (no
// account), is refused and stores nothing. KEEL_KAFKA_TOPIC needs an admin
// account: made for one, the topic is created and grown; for another,
// or for none, it is refused with an error wrapping core.ErrForbidden
// (the Kafka door's TOPIC_AUTHORIZATION_FAILED) and changes nothing.
func TestKafkaPeersSignAsTheClient(t *testing.T) {
	rules, err := acl.Parse("plain_acl.yml", []byte(peersACL))
	if err != nil {
		t.Fatal(err)
	}
	a := acl.NewWithRules(rules, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := testcluster.Start(t, testcluster.WithHandler(func(h remoting.Handler) remoting.Handler { return acl.Wrap(h, a) }))
	if _, err := c.Broker().Core().EnsureTopic("orders", 2, core.PermRW); err != nil {
		t.Fatal(err)
	}
	peers := newKafkaPeers(nil)
	defer peers.close()
	peers.secret = func(user string) (string, bool) {
		if acct := a.Account(user); acct != nil {
			return acct.SecretKey(), true
		}
		return "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	as := func(user string) context.Context { return kafka.WithPeerUser(ctx, user) }

	if err := peers.CommitOffsets(as("consumer1"), c.BrokerAddr(), "billing", "orders", map[int32]int64{1: 4}); err != nil {
		t.Fatalf("commit as consumer1: %v", err)
	}
	if off, ok := c.Broker().Core().ConsumerOffset("billing", "orders", 1, false); !ok || off != 4 {
		t.Fatalf("billing's offset of queue 1: %d %v", off, ok)
	}
	offs, err := peers.FetchOffsets(as("consumer1"), c.BrokerAddr(), "billing", "orders")
	if err != nil || offs["orders"][1] != 4 {
		t.Fatalf("fetch as consumer1: %v %v", offs, err)
	}
	for _, user := range []string{"others1", ""} {
		err := peers.CommitOffsets(as(user), c.BrokerAddr(), "billing", "orders", map[int32]int64{1: 9})
		if err == nil || !strings.Contains(err.Error(), "NO_PERMISSION") {
			t.Errorf("commit as %q: %v, want NO_PERMISSION", user, err)
		}
	}
	if off, _ := c.Broker().Core().ConsumerOffset("billing", "orders", 1, false); off != 4 {
		t.Fatalf("a refused commit moved the offset to %d", off)
	}
	for _, user := range []string{"consumer1", ""} {
		if err := peers.CreateTopic(as(user), c.BrokerAddr(), "made", 1, nil); !errors.Is(err, core.ErrForbidden) {
			t.Errorf("KEEL_KAFKA_TOPIC create as %q: %v, want NO_PERMISSION (core.ErrForbidden)", user, err)
		}
	}
	if _, ok := c.Broker().Core().Topic("made"); ok {
		t.Error("the refused topic was created")
	}
	if err := peers.CreateTopic(as("admin01"), c.BrokerAddr(), "made", 2, nil); err != nil {
		t.Fatalf("KEEL_KAFKA_TOPIC create as admin01: %v", err)
	}
	if err := peers.GrowTopic(as("consumer1"), c.BrokerAddr(), "made", 4); !errors.Is(err, core.ErrForbidden) {
		t.Errorf("KEEL_KAFKA_TOPIC grow as consumer1: %v, want NO_PERMISSION (core.ErrForbidden)", err)
	}
	if tc, ok := c.Broker().Core().Topic("made"); !ok || tc.ReadQueueNums != 2 {
		t.Fatalf("made after a refused grow: %+v %v, want 2 queues", tc, ok)
	}
	if err := peers.GrowTopic(as("admin01"), c.BrokerAddr(), "made", 4); err != nil {
		t.Fatalf("KEEL_KAFKA_TOPIC grow as admin01: %v", err)
	}
	if tc, _ := c.Broker().Core().Topic("made"); tc.ReadQueueNums != 4 {
		t.Errorf("made after the grow: %d queues, want 4", tc.ReadQueueNums)
	}
}
