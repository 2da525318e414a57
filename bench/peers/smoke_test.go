package peers

import (
	"bytes"
	"compress/flate"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestPeerSmoke runs the harness and the NATS driver for a second against
// an in-process NATS server with JetStream on a temporary directory: the
// producers' messages are acknowledged and delivered, latencies and the
// CPU time (of this process, where the server runs) are measured.
func TestPeerSmoke(t *testing.T) {
	if os.Getenv("KEEL_PEER_DRIVER") != "" {
		t.Skip("a real run is configured")
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	c := &config{driver: "nats", addr: ns.ClientURL(), payload: "json", pids: []int{os.Getpid()}, warmup: 200 * time.Millisecond,
		duration: time.Second, producers: 2, inflight: 32, consumers: 2, size: 1024, parts: 1}
	res, err := measure(c, &natsDriver{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acked == 0 || res.Delivered == 0 || res.E2ESamples == 0 || res.E2EP50Ms <= 0 || res.E2EP99Ms < res.E2EP50Ms ||
		res.BrokerCPUSecs <= 0 || res.CPUPerMsgUs <= 0 || res.Errors != 0 {
		t.Fatalf("smoke run: %+v", res)
	}
}

// TestHistogram checks the quantiles against known samples.
func TestHistogram(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 500}, {0.99, 990}, {1, 1000}} {
		if got := h.quantile(c.q); got < c.want || got > c.want*1.011 {
			t.Errorf("quantile(%v) = %v ms, want %v within 1%%", c.q, got, c.want)
		}
	}
	if got := (&histogram{}).quantile(0.5); got != 0 {
		t.Errorf("empty histogram: %v", got)
	}
}

// TestTemplate: a JSON-like body compresses, a random one does not, and
// both have the asked size.
func TestTemplate(t *testing.T) {
	deflated := func(b []byte) int {
		var buf bytes.Buffer
		w, _ := flate.NewWriter(&buf, flate.DefaultCompression)
		w.Write(b)
		w.Close()
		return buf.Len()
	}
	for _, c := range []struct {
		kind     string
		min, max float64 // deflated size over size
	}{{"random", 0.95, 2}, {"json", 0, 0.6}} {
		b := makeTemplate(c.kind, 1024)
		if len(b) != 1024 {
			t.Errorf("%s: %d bytes", c.kind, len(b))
		}
		if r := float64(deflated(b)) / 1024; r < c.min || r > c.max {
			t.Errorf("%s: deflates to %.2f of its size, want %.2f..%.2f", c.kind, r, c.min, c.max)
		}
	}
}
