// Package httpauth guards Keel's HTTP endpoint (metrics, console) with a
// shared token. A request is let through when it carries the token as
//
//	Authorization: Bearer <token>        (curl, Prometheus bearer_token)
//	Authorization: Basic <any user>:<token>  (browsers prompt for it)
//
// Anything else gets 401 with a Basic challenge, so a browser opening the
// console asks for the token once and then sends it with every request.
// Comparison is constant-time. An empty token disables the check.
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

// Require returns next guarded by token; with token == "" it returns next.
// Refusals are logged at Warn (with the peer and path, never a token) when
// log is not nil.
func Require(token string, next http.Handler, log *slog.Logger) http.Handler {
	if token == "" {
		return next
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got, ok := presented(r); ok {
			sum := sha256.Sum256([]byte(got))
			if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
				next.ServeHTTP(w, r)
				return
			}
		}
		if log != nil {
			log.Warn("http: request without a valid token", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="`+Realm+`", charset="UTF-8"`)
		http.Error(w, "401 unauthorized: this endpoint needs the httpToken (Authorization: Bearer <token>)", http.StatusUnauthorized)
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
