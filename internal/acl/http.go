package acl

import (
	"crypto/sha256"
	"crypto/subtle"
)

// AdminCredentials reports whether accessKey and secretKey are those of an
// admin account in the rules in force. Keel's HTTP endpoint accepts them as
// HTTP Basic credentials when aclEnable=true: the console and /metrics show
// every topic and message body, so only an account that may administer
// everything may open them. Address white lists do not apply there. The
// secret is compared in constant time.
func (a *Authorizer) AdminCredentials(accessKey, secretKey string) bool {
	acct := a.rules.Load().Accounts[accessKey]
	if acct == nil || !acct.Admin {
		return false
	}
	want := sha256.Sum256([]byte(acct.secretKey))
	got := sha256.Sum256([]byte(secretKey))
	return subtle.ConstantTimeCompare(want[:], got[:]) == 1
}
