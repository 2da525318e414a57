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
