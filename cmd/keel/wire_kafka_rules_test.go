package main

import (
	"testing"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/kafka"
)

// TestKafkaAccountsEditRules: the adapter reads plain_acl.yml's rules as
// the Kafka door's and writes its changes back into the accounts.
func TestKafkaAccountsEditRules(t *testing.T) {
	rules, err := acl.Parse("", []byte("accounts:\n  - accessKey: producer1\n    secretKey: producer-secret\n    defaultTopicPerm: SUB\n    topicPerms: [orders=PUB, audit=DENY]\n"))
	if err != nil {
		t.Fatal(err)
	}
	k := kafkaAccounts{acl.NewWithRules(rules, nil)}
	got := k.Rules()
	if len(got) != 1 || got[0].DefaultTopic != kafka.GrantSub || got[0].Topics["orders"] != kafka.GrantPub || got[0].Topics["audit"] != kafka.GrantDeny {
		t.Fatalf("rules %+v", got)
	}
	if err := k.EditRules(func(m map[string]*kafka.AccountRules) error {
		a := m["producer1"]
		a.Topics["orders"] |= kafka.GrantSub
		a.Groups["billing"] = kafka.GrantSub
		delete(a.Topics, "audit")
		a.DefaultTopic = kafka.GrantDeny
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !k.MayTopic("producer1", "orders", kafka.PermSub) || !k.MayGroup("producer1", "billing", kafka.PermSub) || k.MayTopic("producer1", "audit", kafka.PermSub) {
		t.Fatalf("after the edit: %+v", k.Rules())
	}
}
