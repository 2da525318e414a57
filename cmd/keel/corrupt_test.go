package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/keelmq/keel/internal/admin"
)

// A record corrupted at rest under a running `keel serve` does not stop a
// consumer (msg tail gets the messages after it) and `keel corrupt list`
// shows it. (At rest: no read window, which would serve the newest records
// as they were written.)
func TestCorruptListCommand(t *testing.T) {
	c := startClusterWith(t, "scrubBytesPerSecond=0\ncommitLogReadWindowBytes=0\n")
	c.ok("topic", "create", "Shelf", "--queues", "1")
	var js []admin.BrokerIntegrity
	c.okJSON(&js, "corrupt", "list")
	if len(js) != 1 || len(js[0].Records) != 0 || js[0].Scrub.BytesPerSecond != 0 {
		t.Fatalf("corrupt list of a sound store: %+v", js)
	}
	for _, body := range []string{"first-intact", "corrupt-me", "last-intact"} {
		c.ok("msg", "send", "--topic", "Shelf", "--body", body)
	}
	c.eventually(`last-intact`, "msg", "tail", "--topic", "Shelf", "--from-beginning", "--count", "3")

	// Flip a byte of the middle message's body in the CommitLog.
	seg := filepath.Join(c.dataDir, "commitlog", "00000000000000000000")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(data, []byte("corrupt-me"))
	if at < 0 {
		t.Fatal("message not found in the CommitLog")
	}
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("X"), int64(at)); err != nil {
		t.Fatal(err)
	}
	f.Close()

	out := c.ok("msg", "tail", "--topic", "Shelf", "--from-beginning", "--count", "2")
	wantMatch(t, "tail over the corrupt record", out, `(?s)first-intact.*last-intact`)
	if bytes.Contains([]byte(out), []byte("orrupt-me")) {
		t.Fatalf("the corrupt record was delivered:\n%s", out)
	}
	out = c.ok("corrupt", "list")
	wantMatch(t, "corrupt list", out, `BROKER\s+TOPIC\s+QUEUE\s+QUEUE_OFFSET\s+COMMITLOG_OFFSET\s+SIZE\s+FOUND_AT\s+FOUND_BY\s+REASON`)
	wantMatch(t, "corrupt list", out, `broker-a\s+Shelf\s+0\s+1\s+\d+\s+\d+\s+\S+\s+read\s+.*crc`)
	wantMatch(t, "corrupt list", out, `# broker-a: 1 isolated, scrubber off, 0 read faults`)
	c.okJSON(&js, "corrupt", "list")
	if len(js) != 1 || len(js[0].Records) != 1 || js[0].Records[0].Topic != "Shelf" || js[0].Records[0].QueueOffset != 1 {
		t.Fatalf("corrupt list -o json: %+v", js)
	}
}
