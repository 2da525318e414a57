package main

import (
	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/kafka"
)

// The ACL as the Kafka door's ACL and SCRAM APIs read and change it
// (kafka.RuleEditor): plain_acl.yml rewritten by acl.Authorizer.Update.

func (k kafkaAccounts) Rules() []kafka.AccountRules {
	rules := k.a.Rules()
	out := make([]kafka.AccountRules, 0, len(rules.Accounts))
	for _, a := range rules.Accounts {
		out = append(out, kafkaRulesOf(a))
	}
	return out
}

func (k kafkaAccounts) EditRules(edit func(map[string]*kafka.AccountRules) error) error {
	return k.a.Update(func(r *acl.Rules) error {
		m := make(map[string]*kafka.AccountRules, len(r.Accounts))
		for u, a := range r.Accounts {
			ar := kafkaRulesOf(a)
			m[u] = &ar
		}
		if err := edit(m); err != nil {
			return err
		}
		for u, ar := range m {
			a := r.Accounts[u]
			if a == nil {
				continue // accounts are made in the file only
			}
			a.DefaultTopicPerm, a.DefaultGroupPerm = aclPermOf(ar.DefaultTopic), aclPermOf(ar.DefaultGroup)
			a.TopicPerms, a.GroupPerms = aclPermsOf(ar.Topics), aclPermsOf(ar.Groups)
		}
		return nil
	})
}

func kafkaRulesOf(a *acl.Account) kafka.AccountRules {
	ar := kafka.AccountRules{User: a.AccessKey, Admin: a.Admin,
		DefaultTopic: kafkaGrantOf(a.DefaultTopicPerm), DefaultGroup: kafkaGrantOf(a.DefaultGroupPerm),
		Topics: make(map[string]kafka.Grant, len(a.TopicPerms)), Groups: make(map[string]kafka.Grant, len(a.GroupPerms))}
	for n, p := range a.TopicPerms {
		ar.Topics[n] = kafkaGrantOf(p)
	}
	for n, p := range a.GroupPerms {
		ar.Groups[n] = kafkaGrantOf(p)
	}
	return ar
}

func kafkaGrantOf(p acl.Perm) kafka.Grant {
	if p&acl.Deny != 0 {
		return kafka.GrantDeny
	}
	var g kafka.Grant
	if p&acl.Pub != 0 {
		g |= kafka.GrantPub
	}
	if p&acl.Sub != 0 {
		g |= kafka.GrantSub
	}
	return g
}

// aclPermOf is the file's permission for g; no grant is DENY.
func aclPermOf(g kafka.Grant) acl.Perm {
	if g&kafka.GrantDeny != 0 || g&(kafka.GrantPub|kafka.GrantSub) == 0 {
		return acl.Deny
	}
	var p acl.Perm
	if g&kafka.GrantPub != 0 {
		p |= acl.Pub
	}
	if g&kafka.GrantSub != 0 {
		p |= acl.Sub
	}
	return p
}

func aclPermsOf(m map[string]kafka.Grant) map[string]acl.Perm {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]acl.Perm, len(m))
	for n, g := range m {
		out[n] = aclPermOf(g)
	}
	return out
}

var _ kafka.RuleEditor = kafkaAccounts{}
