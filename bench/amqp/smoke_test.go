package amqpbench

import (
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/amqp"
	"github.com/keelmq/keel/internal/store"
)

// TestAMQPBenchSmoke runs the driver for a second against an in-process
// Keel (store and AMQP server): every confirmed message is consumed.
func TestAMQPBenchSmoke(t *testing.T) {
	if os.Getenv("KEEL_AMQP_BENCH_URL") != "" {
		t.Skip("a real run is configured")
	}
	dir := t.TempDir()
	scfg := store.DefaultConfig(dir)
	scfg.CommitLogSegmentBytes = 64 << 20
	scfg.PrefillBytes = -1
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := amqp.New(amqp.Config{DataDir: dir}, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	r, err := run(params{url: "amqp://guest:guest@" + ln.Addr().String() + "/", duration: time.Second, queueType: "quorum",
		inflight: 64, prefetch: 64, bytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if r.Confirmed == 0 || r.Nacked != 0 || r.Consumed != r.Confirmed || r.Product != "Keel" || r.ConfirmP99Ms <= 0 || r.EndToEndP99Ms <= 0 {
		t.Fatalf("smoke run: %+v", r)
	}
}
