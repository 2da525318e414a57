package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/bench"
)

// TestBenchEmbeddedAndReport runs a short produce-consume workload against
// an embedded broker, then turns its JSON result into the report.
func TestBenchEmbeddedAndReport(t *testing.T) {
	dir := t.TempDir()
	wl := filepath.Join(dir, "tiny.yaml")
	src := "description: tiny\nflushDiskType: ASYNC_FLUSH\nmode: produce-consume\nqueuesPerTopic: 2\n" +
		"messageSize: 128\nproducerRate: 500\ninflightPerProducer: 2\nconsumers: 1\ntargetP99: 1s\n"
	if err := os.WriteFile(wl, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"bench", "-w", wl, "--embedded", "ASYNC_FLUSH", "--data-dir", filepath.Join(dir, "data"),
		"--duration", "700ms", "--warmup", "0s", "-o", "json", "--quiet"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res bench.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if !res.Broker.Embedded || res.Broker.FlushDiskType != "ASYNC_FLUSH" || res.TotalSent == 0 ||
		res.TotalSent != res.TotalReceived || !strings.HasPrefix(res.Command, "keel ") {
		t.Fatalf("result %+v", res)
	}
	resFile := filepath.Join(dir, "tiny.json")
	if err := os.WriteFile(resFile, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "benchmarks.md")
	out.Reset()
	code = run(ctx, []string{"bench", "report", "--revision", "abc", "--out", doc, resFile}, &out, &errb)
	if code != 0 {
		t.Fatalf("report exit %d: %s", code, errb.String())
	}
	md, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Keel benchmarks", "`abc`", "### tiny", res.Command, "end-to-end p99"} {
		if !strings.Contains(string(md), want) {
			t.Fatalf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "-w", "x.yaml"},
		{"bench", "-w", "x.yaml", "--namesrv", "a:1", "--embedded", "SYNC_FLUSH"},
		{"bench", "-w", "x.yaml", "--namesrv", "a:1", "-o", "xml"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, errb.String())
		}
	}
}
