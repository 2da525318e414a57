package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/message"
)

// keel check on a replica that stopped mid-truncation: the intent file
// <data-dir>/truncate names the point; a damaged record after it is not
// reported as corruption, and the summary says the truncation is in
// progress and where the log ends.
func TestCheckReportsTruncationInProgress(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir, 20)
	conf := writeConf(t, "mapedFileSizeCommitLog=16777216\n")
	segs, err := os.ReadDir(filepath.Join(dir, "commitlog"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	seg := filepath.Join(dir, "commitlog", segs[0].Name())
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	recLen := int(message.View(data).TotalSize()) + 4
	cut := 12 * recLen
	data[15*recLen+recLen/2] ^= 0xff // damage after the point
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "truncate"), []byte("keel-truncate 1\n"+strconv.Itoa(cut)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", "-c", conf, "--data-dir", dir}, &out, &errOut); code != exitOK {
		t.Fatalf("check mid-truncation: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	s := out.String()
	if !strings.Contains(s, "truncation in progress") || !strings.Contains(s, "at "+strconv.Itoa(cut)+";") ||
		!strings.Contains(s, "12 records") || strings.Contains(s, "problem:") {
		t.Fatalf("summary:\n%s", s)
	}
}
