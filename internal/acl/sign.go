package acl

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"hash"
	"slices"

	"github.com/keelmq/keel/internal/remoting"
)

// Ext keys the clients add to a signed request.
const (
	KeyAccessKey     = "AccessKey"
	KeySignature     = "Signature"
	KeySecurityToken = "SecurityToken"
	// keyUniqueQuery is set by some Java clients after signing; Java
	// brokers leave it out of the signed content.
	keyUniqueQuery = "_UNIQUE_KEY_QUERY"
)

// Sign computes the ACL 1.0 signature exactly as the official Go client
// does (internal/remote/interceptor.go):
//
//	Base64(HmacSHA1(secretKey, v1 ‖ v2 ‖ ... ‖ vn ‖ body))
//
// where v1..vn are the values of ext ordered by key (byte order), with the
// AccessKey included and the Signature and SecurityToken fields left out.
// ext must already contain AccessKey.
func Sign(secretKey string, ext map[string]string, body []byte) string {
	return signExcluding(secretKey, ext, body, KeySignature, KeySecurityToken)
}

func signExcluding(secretKey string, ext map[string]string, body []byte, exclude ...string) string {
	keys := make([]string, 0, len(ext))
	for k := range ext {
		if !slices.Contains(exclude, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	mac := hmac.New(func() hash.Hash { return sha1.New() }, []byte(secretKey))
	for _, k := range keys {
		mac.Write([]byte(ext[k]))
	}
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// verifySignature checks the request's Signature against the secret. The Go
// client leaves SecurityToken out of the signed content; Java clients
// include it and Java brokers skip _UNIQUE_KEY_QUERY; each variant is tried
// only when the request has the field it differs in. Comparison is
// constant-time.
func verifySignature(secretKey string, ext map[string]string, body []byte) bool {
	got := []byte(ext[KeySignature])
	try := func(exclude ...string) bool {
		want := signExcluding(secretKey, ext, body, exclude...)
		return subtle.ConstantTimeCompare([]byte(want), got) == 1
	}
	_, token := ext[KeySecurityToken]
	_, uniq := ext[keyUniqueQuery]
	switch {
	case try(KeySignature, KeySecurityToken):
		return true
	case token && try(KeySignature, keyUniqueQuery):
		return true
	case uniq && try(KeySignature, KeySecurityToken, keyUniqueQuery):
		return true
	case token && uniq && try(KeySignature):
		return true
	}
	return false
}

// SignRequest adds AccessKey and Signature to req as the official clients
// do, for Keel's own tools talking to a broker with access control on.
func SignRequest(req *remoting.Command, accessKey, secretKey string) {
	if req.ExtFields == nil {
		req.ExtFields = make(map[string]string)
	}
	delete(req.ExtFields, KeySignature)
	req.ExtFields[KeyAccessKey] = accessKey
	req.ExtFields[KeySignature] = Sign(secretKey, req.ExtFields, req.Body)
}
