package kafka

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store/record"
)

// kcat runs Debian's kcat (librdkafka 2.0.2) with args and stdin.
func kcat(t *testing.T, stdin string, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command("kcat", args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("kcat %q: %v\nstderr: %s\nstdout: %s", args, err, errOut.String(), out.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("kcat %q hung\nstderr: %s", args, errOut.String())
	}
	return out.String(), errOut.String()
}

// TestKcat: librdkafka produces with acks=-1 in every codec it has (it
// turns compression off, with a NOTICE, unless the Produce range contains
// v0), consumes everything back with -C -e, and lists metadata with -L.
func TestKcat(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat is not installed (apt-get install kcat): librdkafka compatibility not tested")
	}
	n := startNode(t, nil)
	var want []string
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		var in strings.Builder
		for i := range 50 {
			line := fmt.Sprintf("%s-%d", codec, i)
			want = append(want, line)
			in.WriteString(line + "\n")
		}
		_, stderr := kcat(t, in.String(), "-P", "-b", n.addr, "-t", "kcat-t", "-p", "0", "-z", codec,
			"-X", "acks=all", "-X", "topic.metadata.refresh.interval.ms=1000")
		if strings.Contains(stderr, "does not support compression") || strings.Contains(stderr, "ERROR") {
			t.Fatalf("kcat -z %s: %s", codec, stderr)
		}
	}
	if got := storedCodecs(t, n, "kcat-t", 0); len(got) != 5 {
		t.Fatalf("codecs of the stored batches %v, want all five (compressed batches kept compressed)", got)
	}
	out, _ := kcat(t, "", "-C", "-b", n.addr, "-t", "kcat-t", "-p", "0", "-o", "beginning", "-e", "-f", "%o %s\n")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("kcat consumed %d records, want %d:\n%s", len(lines), len(want), out)
	}
	for i, l := range lines {
		if l != fmt.Sprintf("%d %s", i, want[i]) {
			t.Fatalf("record %d: %q, want %q", i, l, fmt.Sprintf("%d %s", i, want[i]))
		}
	}
	// From an offset inside a compressed batch.
	out, _ = kcat(t, "", "-C", "-b", n.addr, "-t", "kcat-t", "-p", "0", "-o", "120", "-c", "3", "-f", "%o %s\n")
	if got := strings.Fields(out); len(got) != 6 || got[0] != "120" || got[1] != want[120] {
		t.Fatalf("from 120: %q", out)
	}
	// A consumer group (librdkafka's balanced consumer: groups need
	// FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup v0 in
	// range) reads the topic's two partitions to the end.
	out, _ = kcat(t, "", "-b", n.addr, "-G", "kcat-g", "-X", "auto.offset.reset=earliest", "-e", "-f", "%s\n", "kcat-t")
	if got := strings.Fields(out); len(got) != len(want) {
		t.Fatalf("kcat -G consumed %d records, want %d", len(got), len(want))
	}
	meta, _ := kcat(t, "", "-L", "-b", n.addr, "-t", "kcat-t")
	if !strings.Contains(meta, `topic "kcat-t" with 2 partitions`) || !strings.Contains(meta, "leader 0") {
		t.Fatalf("kcat -L:\n%s", meta)
	}
}

// storedCodecs returns the compression codecs of the batches stored in
// (topic, queue).
func storedCodecs(t *testing.T, n *testNode, topic string, qid int32) map[int16]bool {
	t.Helper()
	codecs := map[int16]bool{}
	for i := int64(0); i < n.st.MaxOffset(topic, qid); i++ {
		r, err := n.st.GetMessage(topic, qid, i, 1, 1, nil)
		if err != nil || len(r.Records) != 1 {
			t.Fatalf("entry %d: %v", i, err)
		}
		h, err := parseBatchHeader(record.Envelope(r.Records[0]).Body())
		r.Release()
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		codecs[h.attributes&7] = true
	}
	return codecs
}

// TestKcatSASL: librdkafka authenticates with SCRAM-SHA-256 and PLAIN as a
// Keel account (SaslHandshake v1, SaslAuthenticate), produces and reads
// back; a wrong password gets nothing.
func TestKcatSASL(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat is not installed (apt-get install kcat): librdkafka compatibility not tested")
	}
	n := startACLNode(t)
	admin := func(mech string) []string {
		return []string{"-b", n.addr, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=" + mech,
			"-X", "sasl.username=admin01", "-X", "sasl.password=admin-secret"}
	}
	kcat(t, "one\ntwo\n", append(admin("SCRAM-SHA-256"), "-P", "-t", "kcat-sasl", "-p", "0", "-X", "acks=all")...)
	out, _ := kcat(t, "", append(admin("PLAIN"), "-C", "-t", "kcat-sasl", "-p", "0", "-o", "beginning", "-e")...)
	if out != "one\ntwo\n" {
		t.Fatalf("consumed %q", out)
	}
	cmd := exec.Command("kcat", "-b", n.addr, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512",
		"-X", "sasl.username=admin01", "-X", "sasl.password=wrong-secret", "-L", "-m", "3")
	if b, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("kcat -L with a wrong password succeeded:\n%s", b)
	}
}
