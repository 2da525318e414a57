// Package httpauth guards Keel's HTTP endpoint (metrics, console). A
// request is let through when it carries the shared token (httpToken) as
//
//	Authorization: Bearer <token>        (curl, Prometheus bearer_token)
//	Authorization: Basic <any user>:<token>  (browsers prompt for it)
//
// or, when an account check is configured (aclEnable=true), the access and
// secret key of an ACL admin account as
//
//	Authorization: Basic <accessKey>:<secretKey>
//
// Anything else gets 401 with a Basic challenge, so a browser opening the
// console asks once and then sends the credentials with every request.
// Token comparison is constant-time. With neither a token nor an account
// check the guard lets everything through, so cmd/keel refuses an HTTP
// listener beyond loopback with neither; with either, nothing but /healthz
// and /readyz (which cmd/keel serves outside the guard) answers a request
// without credentials.
//
// Concurrency: the returned handler is safe for concurrent use.
package httpauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
)

// Realm is the Basic-auth realm browsers show.
const Realm = "keel"

// Config says which credentials the endpoint accepts.
type Config struct {
	Token string // httpToken; "" = no token accepted
	// Account, if not nil, accepts HTTP Basic credentials: the user name
	// as access key, the password as secret key (acl's AdminCredentials).
	Account func(accessKey, secretKey string) bool
}

// Open reports whether cfg lets every request through.
func (c Config) Open() bool { return c.Token == "" && c.Account == nil }

// Require returns next guarded by token; with token == "" it returns next.
func Require(token string, next http.Handler, log *slog.Logger) http.Handler {
	return Guard(Config{Token: token}, next, log)
}

// Guard returns next guarded by cfg; with cfg.Open() it returns next.
// Refusals are logged at Warn (with the peer and path, never a credential)
// when log is not nil.
func Guard(cfg Config, next http.Handler, log *slog.Logger) http.Handler {
	if cfg.Open() {
		return next
	}
	want := sha256.Sum256([]byte(cfg.Token))
	tokenOK := func(got string) bool {
		sum := sha256.Sum256([]byte(got))
		return cfg.Token != "" && subtle.ConstantTimeCompare(sum[:], want[:]) == 1
	}
	refusal := "401 unauthorized: this endpoint needs the httpToken (Authorization: Bearer <token>)"
	if cfg.Account != nil {
		refusal = "401 unauthorized: this endpoint needs the credentials of an admin account of the ACL file " +
			"(HTTP Basic: accessKey as user name, secretKey as password)"
		if cfg.Token != "" {
			refusal += " or the httpToken (Authorization: Bearer <token>)"
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got, ok := presented(r); ok && tokenOK(got) {
			next.ServeHTTP(w, r)
			return
		}
		if user, pass, ok := r.BasicAuth(); ok && cfg.Account != nil && cfg.Account(user, pass) {
			next.ServeHTTP(w, r)
			return
		}
		if log != nil {
			log.Warn("http: request without valid credentials", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="`+Realm+`", charset="UTF-8"`)
		http.Error(w, refusal, http.StatusUnauthorized)
	})
}

// presented extracts the token a request carries.
func presented(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(tok), true
	}
	if _, pass, ok := r.BasicAuth(); ok {
		return pass, true
	}
	return "", false
}
