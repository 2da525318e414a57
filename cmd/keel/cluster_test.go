package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
)

// cluster is an in-process `keel serve` for the command tests.
type cluster struct {
	t       *testing.T
	namesrv string
	broker  string // the broker's address
	logs    *syncBuffer
	dataDir string // storePathRootDir of the broker
}

// startCluster runs `keel serve` on a temporary data directory with a small
// ASYNC_FLUSH broker-a and waits until the broker is registered; it is
// stopped when the test ends.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	return startClusterWith(t, "")
}

// startClusterWith is startCluster with extra broker.conf lines.
func startClusterWith(t *testing.T, extraConf string) *cluster {
	t.Helper()
	return startServe(t, "brokerName=broker-a\nflushDiskType=ASYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n"+extraConf)
}

// startServe runs `keel serve` with the broker.conf text conf (whose broker
// must be broker-a, the default) on a temporary data directory, waits until
// the broker is registered and stops it when the test ends.
func startServe(t *testing.T, conf string) *cluster {
	t.Helper()
	path := writeConf(t, conf)
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	dataDir := t.TempDir()
	go func() {
		done <- run(ctx, []string{"serve", "-c", path, "--data-dir", dataDir,
			"--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", "127.0.0.1:0"}, &bytes.Buffer{}, logs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not stop:\n%s", logs.String())
		}
	})
	c := &cluster{t: t, namesrv: namesrvAddrFromLogs(t, logs), logs: logs, dataDir: dataDir}
	waitFor(t, "the broker to register", 30*time.Second, func() bool { return brokerRegistered(t, c.namesrv, "broker-a") })
	ac := admin.New(admin.Config{NamesrvAddrs: []string{c.namesrv}})
	defer ac.Close()
	bs, err := ac.Brokers(context.Background())
	if err != nil || len(bs) != 1 {
		t.Fatalf("brokers %v: %v", bs, err)
	}
	c.broker = bs[0].Addr
	return c
}
