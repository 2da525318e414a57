package core

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// TestRunFlushesOffsets: Run writes committed offsets every
// OffsetFlushInterval, without a Close, and returns when ctx ends.
func TestRunFlushesOffsets(t *testing.T) {
	var fs vfs.FS
	b := newTestBroker(t, func(c *Config) { c.OffsetFlushInterval = 10 * time.Millisecond; fs = c.FS })
	if _, err := b.EnsureTopic("T", 1, PermRW); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitOffset("g", "T", 0, 42); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := readAll(fs, "/data/config/consumerOffset.json")
		if err == nil && strings.Contains(string(data), `"T@g"`) && strings.Contains(string(data), "42") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("offsets not flushed by Run: %q %v", data, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func readAll(fs vfs.FS, name string) ([]byte, error) {
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.NewSectionReader(f, 0, n))
}
