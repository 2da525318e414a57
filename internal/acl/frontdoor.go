package acl

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
)

// For front doors that authenticate a connection once and then check each
// request against the account (the Kafka door: SASL PLAIN or SCRAM with
// the account's accessKey and secretKey), the same rules as Check:

// Trusted reports whether remote matches globalWhiteRemoteAddresses: its
// connections need no credentials.
func (a *Authorizer) Trusted(remote net.Addr) bool {
	ip := remoteIP(remote)
	for _, p := range a.rules.Load().GlobalWhite {
		if p.match(ip) {
			return true
		}
	}
	return false
}

// Account returns the account of accessKey in the rules in force (nil:
// none). Callers look it up per request, so a reload takes effect at once.
func (a *Authorizer) Account(accessKey string) *Account {
	return a.rules.Load().Accounts[accessKey]
}

// Authenticate returns the account whose accessKey and secretKey these
// are (nil otherwise), comparing the secret in constant time.
func (a *Authorizer) Authenticate(accessKey, secretKey string) *Account {
	acct := a.Account(accessKey)
	if acct == nil {
		return nil
	}
	want := sha256.Sum256([]byte(acct.secretKey))
	got := sha256.Sum256([]byte(secretKey))
	if subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
		return nil
	}
	return acct
}

// MayTopic reports whether the account holds need (Pub, Sub or Any) on
// topic: its rule for the topic, else its defaultTopicPerm; an admin
// without resource rules may access everything.
func (acct *Account) MayTopic(topic string, need Perm) bool {
	return permitted(acct, 0, []resource{{name: topic, perm: need}}) == ""
}

// MayGroup is MayTopic for a consumer group.
func (acct *Account) MayGroup(group string, need Perm) bool {
	return permitted(acct, 0, []resource{{name: group, group: true, perm: need}}) == ""
}
