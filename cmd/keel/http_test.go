package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

var httpListenRE = regexp.MustCompile(`msg="HTTP listening" .*?addr=(\S+)`)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeHTTP checks the HTTP listener of keel serve: liveness,
// readiness once registered, metrics moving with traffic, and the console.
func TestServeHTTP(t *testing.T) {
	c := startCluster(t)
	base := c.httpBase()
	if code, body := httpGet(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	waitFor(t, "readiness", 10*time.Second, func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })

	c.ok("topic", "create", "Web", "--queues", "1")
	c.ok("msg", "send", "--topic", "Web", "--body", "hello")
	waitFor(t, "the send to show in /metrics", 10*time.Second, func() bool {
		_, body := httpGet(t, base+"/metrics")
		return strings.Contains(body, `keel_send_requests_total{door="rocketmq",result="SUCCESS",topic="Web"} 1`) &&
			strings.Contains(body, `keel_topic_messages{topic="Web"} 1`)
	})
	_, body := httpGet(t, base+"/metrics")
	for _, want := range []string{"keel_commitlog_bytes ", "keel_disk_used_ratio ", "keel_store_writable 1", "keel_broker_registered 1", "go_goroutines "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, page := httpGet(t, base+"/"); code != 200 || !strings.Contains(page, "Keel console") {
		t.Errorf("console: %d", code)
	}
	if code, topics := httpGet(t, base+"/api/topics"); code != 200 || !strings.Contains(topics, `"topic": "Web"`) {
		t.Errorf("/api/topics: %d %s", code, topics)
	}
	resp, err := http.Post(base+"/api/topics", "application/json", bytes.NewReader([]byte(`{"topic":"X","queues":1}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("console without --console-write accepted an action: %d", resp.StatusCode)
	}
}

// httpBase waits for the HTTP listener's log line and returns its URL.
func (c *cluster) httpBase() string {
	c.t.Helper()
	var base string
	waitFor(c.t, "the HTTP listener", 10*time.Second, func() bool {
		m := httpListenRE.FindStringSubmatch(c.logs.String())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	})
	return base
}

// TestServeHTTPToken: with httpToken the metrics and the console need the
// token (Bearer or Basic password); the probes stay open.
func TestServeHTTPToken(t *testing.T) {
	c := startClusterWith(t, "httpToken=s3cret-token\n")
	base := c.httpBase()
	if code, _ := httpGet(t, base+"/metrics"); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d", code)
	}
	if code, _ := httpGet(t, base+"/api/topics"); code != http.StatusUnauthorized {
		t.Errorf("console API without the token: %d", code)
	}
	if code, _ := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer s3cret-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics with the token: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("GET", base+"/", nil)
	req.SetBasicAuth("ops", "s3cret-token")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("console with the token as Basic password: %d", resp.StatusCode)
	}
}

func TestServeHTTPListenInUse(t *testing.T) {
	c := startCluster(t)
	addr := strings.TrimPrefix(c.httpBase(), "http://")
	var logs bytes.Buffer
	code := run(context.Background(), []string{"serve", "--data-dir", t.TempDir(), "--namesrv-listen", "127.0.0.1:0",
		"--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", addr}, &bytes.Buffer{}, &logs)
	if code != exitError || !strings.Contains(logs.String(), "HTTP listener cannot listen on "+addr) {
		t.Errorf("serve with a busy HTTP address: exit %d\n%s", code, logs.String())
	}
}
