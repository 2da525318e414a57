package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestServeCPUProfile: with KEEL_CPUPROFILE set, keel serve says so at
// start and writes a CPU profile (gzipped, as pprof reads it) when it
// stops.
func TestServeCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.cpu")
	t.Setenv(cpuProfileEnv, path)
	cmd, _, logs := startServeProc(t, t.TempDir())
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("keel serve: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), `msg="writing a CPU profile of this run (KEEL_CPUPROFILE)"`) {
		t.Errorf("no log line about the profile:\n%s", logs.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the profile (%d bytes) is not gzipped: %v", len(b), err)
	}
	if n, err := io.Copy(io.Discard, zr); err != nil || n == 0 {
		t.Fatalf("the profile's content: %d bytes, %v", n, err)
	}
}
