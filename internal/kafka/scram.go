package kafka

// SCRAM credentials (DescribeUserScramCredentials,
// AlterUserScramCredentials) over the accounts of plain_acl.yml. Every
// account can authenticate with SCRAM-SHA-256 and SCRAM-SHA-512, keys
// derived from its secretKey with 4096 iterations (sasl.go), so each is
// described with both. The file keeps the secret itself, which RocketMQ
// clients sign with and PLAIN compares; an upsertion carries only a salt
// and a salted password, from which the secret cannot be recovered, so:
//
//	upsertion matching the account's    accepted, nothing changes (the
//	secretKey (the salted password is   password already is that)
//	PBKDF2 of the secret)
//	any other upsertion                 UNACCEPTABLE_CREDENTIAL (93): set
//	                                    secretKey in plain_acl.yml
//	deletion                            INVALID_REQUEST: the credentials
//	                                    go with the account (remove it
//	                                    from the file)
//	unknown account                     RESOURCE_NOT_FOUND (91)
//	unknown mechanism                   UNSUPPORTED_SASL_MECHANISM (33)
//	iterations outside 4096-16384       UNACCEPTABLE_CREDENTIAL (Kafka's
//	                                    bounds)
//	a user and mechanism twice          DUPLICATE_RESOURCE (92)
//
// Both need an admin account; without access control (no accounts) they
// answer SECURITY_DISABLED.

import (
	"crypto/pbkdf2"
	"crypto/subtle"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	errResourceNotFound       int16 = 91
	errDuplicateResource      int16 = 92
	errUnacceptableCredential int16 = 93

	scramSHA256 int8 = 1
	scramSHA512 int8 = 2

	minScramIterations = 4096
	maxScramIterations = 16384

	msgNoAccounts = "access control is off (aclEnable=false): there are no accounts"
)

func scramMechName(m int8) string {
	switch m {
	case scramSHA256:
		return "SCRAM-SHA-256"
	case scramSHA512:
		return "SCRAM-SHA-512"
	}
	return ""
}

func (s *Server) describeUserSCRAMCredentials(req *kmsg.DescribeUserSCRAMCredentialsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if s.cfg.ACL == nil {
		resp.ErrorCode, resp.ErrorMessage = errSecurityDisabled, kmsg.StringPtr(msgNoAccounts)
		return resp
	}
	var users []string
	if len(req.Users) == 0 { // null or empty: every account
		ed, code, msg := s.ruleEditor()
		if code != errNone {
			resp.ErrorCode, resp.ErrorMessage = code, kmsg.StringPtr(msg)
			return resp
		}
		for _, a := range ed.Rules() {
			users = append(users, a.User)
		}
		slices.Sort(users)
	} else {
		for _, u := range req.Users {
			users = append(users, u.Name)
		}
	}
	seen := map[string]int{}
	for _, u := range users {
		seen[u]++
	}
	for i, u := range users {
		if slices.Index(users, u) != i {
			continue // answered once
		}
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = u
		_, known := s.cfg.ACL.Secret(u)
		switch {
		case seen[u] > 1:
			r.ErrorCode, r.ErrorMessage = errDuplicateResource, kmsg.StringPtr("the user is named more than once")
		case !known:
			r.ErrorCode, r.ErrorMessage = errResourceNotFound, kmsg.StringPtr("no account "+u+" in plain_acl.yml")
		default:
			for _, m := range []int8{scramSHA256, scramSHA512} {
				r.CredentialInfos = append(r.CredentialInfos, kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{Mechanism: m, Iterations: scramIterations})
			}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp
}

func (s *Server) alterUserSCRAMCredentials(req *kmsg.AlterUserSCRAMCredentialsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	type result struct {
		code int16
		msg  string
	}
	var order []string
	results := map[string]*result{}
	seen := map[string]bool{} // user + mechanism
	set := func(user string, mech int8, code int16, msg string) {
		r := results[user]
		if r == nil {
			r = &result{}
			results[user] = r
			order = append(order, user)
		}
		key := fmt.Sprintf("%d\x00%s", mech, user)
		if seen[key] {
			r.code, r.msg = errDuplicateResource, "the user and mechanism are named more than once"
			return
		}
		seen[key] = true
		if r.code == errNone && code != errNone {
			r.code, r.msg = code, msg
		}
	}
	for _, d := range req.Deletions {
		code, msg := s.scramDeletion(d)
		set(d.Name, d.Mechanism, code, msg)
	}
	for _, u := range req.Upsertions {
		code, msg := s.scramUpsertion(u)
		set(u.Name, u.Mechanism, code, msg)
	}
	for _, u := range order {
		r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		r.User, r.ErrorCode = u, results[u].code
		if results[u].msg != "" {
			r.ErrorMessage = kmsg.StringPtr(results[u].msg)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp
}

func (s *Server) scramDeletion(d kmsg.AlterUserSCRAMCredentialsRequestDeletion) (int16, string) {
	if s.cfg.ACL == nil {
		return errSecurityDisabled, msgNoAccounts
	}
	if scramMechName(d.Mechanism) == "" {
		return errUnsupportedSASLMechanism, "unknown SCRAM mechanism (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)"
	}
	if _, ok := s.cfg.ACL.Secret(d.Name); !ok {
		return errResourceNotFound, "no account " + d.Name + " in plain_acl.yml"
	}
	return errInvalidRequest, "an account's SCRAM credentials are derived from its secretKey in plain_acl.yml and go with the account: remove the account from the file"
}

func (s *Server) scramUpsertion(u kmsg.AlterUserSCRAMCredentialsRequestUpsertion) (int16, string) {
	if s.cfg.ACL == nil {
		return errSecurityDisabled, msgNoAccounts
	}
	mech := scramMechName(u.Mechanism)
	switch {
	case mech == "":
		return errUnsupportedSASLMechanism, "unknown SCRAM mechanism (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)"
	case u.Iterations < minScramIterations || u.Iterations > maxScramIterations:
		return errUnacceptableCredential, fmt.Sprintf("iterations must be between %d and %d", minScramIterations, maxScramIterations)
	case len(u.Salt) == 0:
		return errUnacceptableCredential, "the salt is empty"
	}
	secret, ok := s.cfg.ACL.Secret(u.Name)
	if !ok {
		return errResourceNotFound, "no account " + u.Name + " in plain_acl.yml (accounts, with their secretKey, are added to the file)"
	}
	h := scramHash(mech)
	salted, err := pbkdf2.Key(h, secret, u.Salt, int(u.Iterations), h().Size())
	if err == nil && subtle.ConstantTimeCompare(salted, u.SaltedPassword) == 1 {
		return errNone, "" // the account's password already
	}
	return errUnacceptableCredential, "Keel keeps each account's secretKey in plain_acl.yml (RocketMQ clients sign with it, PLAIN compares it) and derives SCRAM from it; a salted password cannot give the secret back, so only the account's current password is accepted: set secretKey in plain_acl.yml"
}

// scramDenied answers a SCRAM request of an account that is not an
// admin; nil for other requests.
func scramDenied(body kmsg.Request, msg *string) kmsg.Response {
	switch b := body.(type) {
	case *kmsg.DescribeUserSCRAMCredentialsRequest:
		r := b.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
		r.ErrorCode, r.ErrorMessage = errClusterAuthorization, msg
		return r
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		r := b.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
		users := map[string]bool{}
		for _, d := range b.Deletions {
			users[d.Name] = true
		}
		for _, u := range b.Upsertions {
			users[u.Name] = true
		}
		for _, u := range slices.Sorted(maps.Keys(users)) {
			r.Results = append(r.Results, kmsg.AlterUserSCRAMCredentialsResponseResult{User: u, ErrorCode: errClusterAuthorization, ErrorMessage: msg})
		}
		return r
	}
	return nil
}
