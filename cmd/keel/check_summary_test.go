package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// flipWords flips a 4-byte word in the body of each of the given records of
// the first segment of the store in dir (fillStore's records are all the
// same size) and returns the segment's file name.
func flipWords(t *testing.T, dir string, records ...int) string {
	t.Helper()
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
	for _, r := range records {
		for k := range 4 {
			data[r*recLen+recLen/2+k] ^= 0xff
		}
	}
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return segs[0].Name()
}

func runCheck(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"check"}, args...), &out, &errOut)
	return code, out.String() + errOut.String()
}

// One flipped 4-byte word gives a short report: counts by kind and the
// problems themselves (it used to print 158 lines); many give the first
// few and a count, -v lists them all.
func TestCheckSummaryIsShort(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir, 300)
	conf := writeConf(t, "mapedFileSizeCommitLog=16777216\n")
	seg := flipWords(t, dir, 150)
	code, out := runCheck(t, "-c", conf, "--data-dir", dir)
	if code != exitProblems {
		t.Fatalf("exit %d, want %d\n%s", code, exitProblems, out)
	}
	t.Logf("one flipped word:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, want := range []string{"problems by kind:", store.KindCorruptEntry, store.KindBadEntry, seg, "FAILED: 2 problems", "docs/operations.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if len(lines) > 12 {
		t.Fatalf("one flipped word: %d lines:\n%s", len(lines), out)
	}

	for r := 13; r < 300; r += 20 { // none next to 150: adjacent damage is one corrupt range
		flipWords(t, dir, r)
	}
	code, out = runCheck(t, "-c", conf, "--data-dir", dir)
	listed := strings.Count(out, "\nproblem: ")
	if code != exitProblems || listed != checkListed || !strings.Contains(out, "more problems (keel check -v lists them all)") {
		t.Fatalf("many problems: exit %d, %d listed:\n%s", code, listed, out)
	}
	code, out = runCheck(t, "-c", conf, "--data-dir", dir, "-v")
	if listed := strings.Count(out, "\nproblem: "); code != exitProblems || listed != 32 || !strings.Contains(out, "FAILED: 32 problems") {
		t.Fatalf("-v: exit %d, %d listed, want all 32:\n%s", code, listed, out)
	}
}

// The documented procedure: a start refuses naming the flag and the docs,
// a start with repair keeps every other record, and keel check passes
// afterwards, showing what the repair left.
func TestCheckPassesAfterRepair(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir, 300)
	conf := writeConf(t, "mapedFileSizeCommitLog=16777216\n")
	flipWords(t, dir, 150)
	cfg := store.DefaultConfig(dir)
	cfg.CommitLogSegmentBytes = 16 << 20
	_, err := store.Open(cfg)
	if err == nil || !strings.Contains(err.Error(), "--repair-corruption") || !strings.Contains(err.Error(), "docs/operations.md") ||
		strings.Contains(err.Error(), "RepairCorruption") {
		t.Fatalf("refusal does not name the flag and the docs: %v", err)
	}
	cfg.RepairCorruption = true
	st, err := store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.MaxOffset("T", 0) + st.MaxOffset("T", 1) + st.MaxOffset("T", 2) + st.MaxOffset("T", 3); n != 300 {
		t.Fatalf("queue offsets after the repair: %d, want 300", n)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	code, out := runCheck(t, "-c", conf, "--data-dir", dir)
	t.Logf("keel check after the repair:\n%s", out)
	if code != exitOK || !strings.Contains(out, "299 records") || !strings.Contains(out, "repaired: 1 hole record (296 bytes)") ||
		!strings.Contains(out, "1 queue entry of messages lost") || !strings.Contains(out, "quarantine: 1 file, 296 bytes") || !strings.Contains(out, "OK: no problems") {
		t.Fatalf("check after the repair: exit %d\n%s", code, out)
	}
	if _, out := runCheck(t, "-c", conf, "--data-dir", dir, "-v"); !strings.Contains(out, "  hole: ") || !strings.Contains(out, ": 296 bytes") {
		t.Fatalf("-v does not list the hole record:\n%s", out)
	}
}

// The procedure of docs/operations.md with the real commands: keel check
// finds the damage, keel serve refuses naming the flag and the docs, keel
// serve --repair-corruption starts, and keel check passes afterwards.
func TestCorruptionProcedure(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir, 300)
	conf := writeConf(t, "brokerName=broker-test\nmapedFileSizeCommitLog=16777216\n")
	flipWords(t, dir, 150)
	if code, out := runCheck(t, "-c", conf, "--data-dir", dir); code != exitProblems {
		t.Fatalf("detect: exit %d\n%s", code, out)
	}
	args := []string{"serve", "-c", conf, "--data-dir", dir,
		"--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "", "--kafka-listen", "", "--broker-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}
	var refused bytes.Buffer
	if code := run(context.Background(), args, &bytes.Buffer{}, &refused); code != exitError ||
		!strings.Contains(refused.String(), "--repair-corruption") || !strings.Contains(refused.String(), "docs/operations.md") {
		t.Fatalf("serve on a corrupt store: exit %d\n%s", code, refused.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append(args, "--repair-corruption"), &bytes.Buffer{}, &logs) }()
	addr := namesrvAddrFromLogs(t, &logs)
	waitFor(t, "the repaired broker to register", 30*time.Second, func() bool { return brokerRegistered(t, addr, "broker-test") })
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("serve --repair-corruption exited %d:\n%s", code, logs.String())
	}
	if !strings.Contains(logs.String(), "corrupt bytes replaced by a hole record") {
		t.Errorf("the repair is not logged:\n%s", logs.String())
	}
	if code, out := runCheck(t, "-c", conf, "--data-dir", dir); code != exitOK || !strings.Contains(out, "repaired: 1 hole record") {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
}

// The summary counts in words that agree with the numbers: "1 segment",
// "1 queue", "1 problem", never "1 problems".
func TestCheckSummaryPlurals(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir, 1)
	conf := writeConf(t, "mapedFileSizeCommitLog=16777216\n")
	// A second ConsumeQueue entry, pointing past the end of the log: one
	// problem.
	names, err := os.ReadDir(filepath.Join(dir, "consumequeue", "T", "0"))
	if err != nil || len(names) != 1 {
		t.Fatalf("queue files: %v %v", names, err)
	}
	cq := filepath.Join(dir, "consumequeue", "T", "0", names[0].Name())
	data, err := os.ReadFile(cq)
	if err != nil {
		t.Fatal(err)
	}
	past := append([]byte(nil), data[:20]...)
	binary.BigEndian.PutUint64(past, 1<<20) // the entry's CommitLog offset (bytes 0..7)
	data = append(data[:20:20], past...)
	if err := os.WriteFile(cq, data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runCheck(t, "-c", conf, "--data-dir", dir)
	if code != exitProblems {
		t.Fatalf("exit %d, want %d\n%s", code, exitProblems, out)
	}
	for _, want := range []string{"commitlog: 1 segment, 1 record, ", "consumequeues: 1 queue, 2 entries; index: 0 keys;", "FAILED: 1 problem, 0 warnings;"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	for _, wrong := range []string{"1 problems", "1 queues", "1 segments", "1 records", "1 entries"} {
		if strings.Contains(out, wrong) {
			t.Errorf("summary says %q:\n%s", wrong, out)
		}
	}
}
