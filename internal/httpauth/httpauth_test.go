package httpauth

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRequire(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	var logs bytes.Buffer
	h := Require("s3cret-token", ok, slog.New(slog.NewTextHandler(&logs, nil)))
	cases := []struct {
		name string
		set  func(*http.Request)
		want int
	}{
		{"bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-token") }, 200},
		{"basic", func(r *http.Request) { r.SetBasicAuth("admin", "s3cret-token") }, 200},
		{"none", func(r *http.Request) {}, 401},
		{"wrong bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-tokeN") }, 401},
		{"prefix", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") }, 401},
		{"wrong basic", func(r *http.Request) { r.SetBasicAuth("s3cret-token", "x") }, 401},
		{"query string ignored", func(r *http.Request) { r.URL.RawQuery = "token=s3cret-token" }, 401},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/api/info", nil)
		c.set(r)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s: %d, want %d", c.name, w.Code, c.want)
		}
		if c.want == 401 && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), `Basic realm="keel"`) {
			t.Errorf("%s: no Basic challenge", c.name)
		}
	}
	if !strings.Contains(logs.String(), "path=/api/info") || strings.Contains(logs.String(), "s3cret") {
		t.Fatalf("log: %s", logs.String())
	}
	if Require("", ok, nil) == nil {
		t.Fatal("empty token")
	}
	w := httptest.NewRecorder()
	Require("", ok, nil).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 200 {
		t.Fatalf("no token configured: %d", w.Code)
	}
}

// TestGuardAccounts: with an account check (aclEnable=true) Basic
// credentials of an accepted account pass, and so does the token if set;
// nothing else does.
func TestGuardAccounts(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	account := func(ak, sk string) bool { return ak == "adminKey1" && sk == "adminSecret1" }
	set := func(ak, sk string) func(*http.Request) { return func(r *http.Request) { r.SetBasicAuth(ak, sk) } }
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	cases := []struct {
		name  string
		token string
		set   func(*http.Request)
		want  int
	}{
		{"account", "", set("adminKey1", "adminSecret1"), 200},
		{"wrong secret", "", set("adminKey1", "adminSecret2"), 401},
		{"unknown key", "", set("someone", "adminSecret1"), 401},
		{"nothing", "", func(*http.Request) {}, 401},
		{"empty bearer without a token", "", bearer(""), 401},
		{"empty basic without a token", "", set("x", ""), 401},
		{"token as bearer", "tok-12345", bearer("tok-12345"), 200},
		{"token as basic password", "tok-12345", set("x", "tok-12345"), 200},
		{"account beside a token", "tok-12345", set("adminKey1", "adminSecret1"), 200},
	}
	for _, c := range cases {
		h := Guard(Config{Token: c.token, Account: account}, ok, nil)
		r := httptest.NewRequest("GET", "/api/messages?id=X", nil)
		c.set(r)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s: %d, want %d", c.name, w.Code, c.want)
		}
		if w.Code == 401 && !strings.Contains(w.Body.String(), "admin account") {
			t.Errorf("%s: refusal does not say what is needed: %q", c.name, w.Body.String())
		}
	}
}
