package main

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// fillStore writes n messages to a store in dir and closes it.
func fillStore(t *testing.T, dir string, n int) {
	t.Helper()
	cfg := store.DefaultConfig(dir)
	cfg.CommitLogSegmentBytes = 16 << 20
	st, err := store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	host := netip.MustParseAddrPort("127.0.0.1:10911")
	for i := range n {
		m := &message.Message{Topic: "T", Body: bytes.Repeat([]byte{'a' + byte(i%26)}, 200), BornHost: host, StoreHost: host}
		if res := st.PutMessage(context.Background(), m); res.Status != store.PutOK {
			t.Fatalf("put: %v %v", res.Status, res.Err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckSoundAndCorruptStore(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir, 20)
	conf := writeConf(t, "mapedFileSizeCommitLog=16777216\n")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", "-c", conf, "--data-dir", dir}, &out, &errOut); code != exitOK {
		t.Fatalf("check of a sound store: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "20 records") || !strings.Contains(out.String(), "OK") {
		t.Errorf("summary: %q", out.String())
	}

	// Flip a body byte of the 5th record (records are the same size).
	segs, err := os.ReadDir(filepath.Join(dir, "commitlog"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	seg := filepath.Join(dir, "commitlog", segs[0].Name())
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	recLen := int(message.View(data).TotalSize()) + 4 // record + CRC trailer
	data[4*recLen+recLen/2] ^= 0xff
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"check", "-c", conf, "--data-dir", dir}, &out, &errOut); code != exitProblems {
		t.Fatalf("check of a corrupt store: exit %d, want %d\n%s%s", code, exitProblems, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "problem:") || !strings.Contains(out.String(), segs[0].Name()) {
		t.Errorf("corruption not reported with its file:\n%s", out.String())
	}
}

// keel check lists the records the broker isolated (its registry), next to
// the problem their bytes still are.
func TestCheckListsIsolatedRecords(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir, 10)
	cfg := store.DefaultConfig(dir)
	cfg.CommitLogSegmentBytes = 16 << 20
	st, err := store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Damage at rest while the broker runs (Open verifies this tail).
	seg := filepath.Join(dir, "commitlog", "00000000000000000000")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	recLen := int(message.View(data).TotalSize()) + 4
	data[3*recLen+recLen/2] ^= 0xff
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := st.GetMessage("T", 0, 3, 1, 1<<20, nil)
	if err != nil || len(r.Records) != 1 {
		t.Fatalf("read over the corrupt record: %v", err)
	}
	r.Release()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	conf := writeConf(t, "mapedFileSizeCommitLog=16777216\n")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", "-c", conf, "--data-dir", dir}, &out, &errOut); code != exitProblems {
		t.Fatalf("check: exit %d, want %d\n%s%s", code, exitProblems, out.String(), errOut.String())
	}
	wantMatch(t, "check", out.String(), `isolated: T/0 offset 3 at CommitLog offset \d+ \(\d+ bytes\), found by read \S+: .*crc`)
	if !strings.Contains(out.String(), "--repair-corruption replaces them by hole records") {
		t.Errorf("check does not say how to repair isolated records:\n%s", out.String())
	}

	// A start with --repair-corruption replaces it by a hole record and
	// drops it from the registry: keel check passes.
	cfg.RepairCorruption = true
	if st, err = store.Open(cfg); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"check", "-c", conf, "--data-dir", dir}, &out, &errOut); code != exitOK {
		t.Fatalf("check after the repair: exit %d, want %d\n%s%s", code, exitOK, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "repaired: 1 hole record") || strings.Contains(out.String(), "isolated:") {
		t.Fatalf("check after the repair:\n%s", out.String())
	}
}
