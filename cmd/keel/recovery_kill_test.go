package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kgo"
)

// serveProc is keel serve as a child process with only the Kafka door,
// on a free loopback port.
type serveProc struct {
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}
}

func startKillServe(t *testing.T, dir string, extra ...string) *serveProc {
	t.Helper()
	args := append([]string{"serve", "--data-dir", dir, "--namesrv-listen", "127.0.0.1:0",
		"--kafka-listen", "127.0.0.1:0", "--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--http-listen", "",
		"-c", writeConf(t, "flushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n")}, extra...)
	p := &serveProc{cmd: exec.Command(os.Args[0], args...), logs: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN=1")
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.exited })
	return p
}

// kafkaAddr waits for the Kafka listener; "" if the process exited first.
func (p *serveProc) kafkaAddr(t *testing.T) string {
	t.Helper()
	var addr string
	waitFor(t, "the Kafka listener or an exit", 30*time.Second, func() bool {
		if m := kafkaListenRE.FindStringSubmatch(p.logs.String()); m != nil {
			addr = m[1]
			return true
		}
		select {
		case <-p.exited:
			return true
		default:
			return false
		}
	})
	return addr
}

// logEntry is a CommitLog entry found by walking the segment files.
type logEntry struct {
	phys, size int64 // size with the CRC trailer
	file       string
	pos        int64
}

// walkLog lists the entries of the CommitLog in dir (records, not blank
// markers), stopping at the first that does not frame.
func walkLog(t *testing.T, dir string) []logEntry {
	t.Helper()
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []logEntry
	for _, n := range names {
		base, ok := commitlog.ParseSegmentName(n.Name())
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for pos := int64(0); pos+8 <= int64(len(b)); {
			total := int64(int32(binary.BigEndian.Uint32(b[pos:])))
			if int32(binary.BigEndian.Uint32(b[pos+4:])) == message.MagicBlank || total < 8 || pos+total+commitlog.TrailerBytes > int64(len(b)) {
				break
			}
			out = append(out, logEntry{phys: base + pos, size: total + commitlog.TrailerBytes, file: filepath.Join(dir, n.Name()), pos: pos})
			pos += total + commitlog.TrailerBytes
		}
	}
	return out
}

var killValueRE = regexp.MustCompile(`w\d-\d{6}-`)

// TestKill9ThenDamageBelowTheFlushedMarkIsNeverCut: four SYNC_FLUSH
// producers (2 KiB values, acks=all) while keel serve is killed with
// SIGKILL; then one byte is flipped in the record at the checkpoint's
// flushed offset, which the flushed mark shows was fdatasynced before the
// kill. The start must refuse, naming it (it used to cut the log there as
// an unsynced tail and serve without every record after it); with
// --repair-corruption it starts and every acknowledged message is there
// but those in the damaged record, which is in quarantine, not cut.
func TestKill9ThenDamageBelowTheFlushedMarkIsNeverCut(t *testing.T) {
	dir := t.TempDir()
	p := startKillServe(t, dir)
	addr := p.kafkaAddr(t)
	if addr == "" {
		t.Fatalf("keel serve exited:\n%s", p.logs.String())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.AllowAutoTopicCreation(),
		kgo.ProducerLinger(0), kgo.RecordRetries(0), kgo.ProduceRequestTimeout(5*time.Second),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "damaged", Value: []byte("first")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	type key struct {
		partition int32
		offset    int64
	}
	var (
		mu    sync.Mutex
		acked = map[key]string{}
		wg    sync.WaitGroup
	)
	pad := strings.Repeat("v", 2048)
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				r := &kgo.Record{Topic: "damaged", Value: fmt.Appendf(nil, "w%d-%06d-%s", w, i, pad)}
				done := make(chan struct{})
				cl.Produce(ctx, r, func(r *kgo.Record, err error) {
					if err == nil {
						mu.Lock()
						acked[key{r.Partition, r.Offset}] = string(r.Value)
						mu.Unlock()
					}
					close(done)
				})
				select {
				case <-done:
				case <-stop:
					return
				}
			}
		})
	}
	// Long enough for the checkpoint (written about once a second) to
	// exist and lag.
	waitFor(t, "3000 acknowledged records and a checkpoint", 60*time.Second, func() bool {
		if _, err := os.Stat(filepath.Join(dir, "checkpoint")); err != nil {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 3000
	})
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	close(stop)
	wg.Wait()
	cl.Close()
	mu.Lock()
	want := make(map[key]string, len(acked))
	for k, v := range acked {
		want[k] = v
	}
	mu.Unlock()

	// The record at the checkpoint's flushed offset, below the mark.
	logDir := filepath.Join(dir, "commitlog")
	mark, err := commitlog.ReadMark(vfs.OS{}, logDir)
	if err != nil || !mark.Found {
		t.Fatalf("flushed mark after the kill: %+v %v", mark, err)
	}
	cpBytes, err := os.ReadFile(filepath.Join(dir, "checkpoint"))
	if err != nil || len(cpBytes) < 16 {
		t.Fatalf("checkpoint: %v", err)
	}
	cpFlushed := int64(binary.BigEndian.Uint64(cpBytes[8:16])) // store package doc: CommitLog flushed offset
	entries := walkLog(t, logDir)
	vi := -1 // the first record at or after the checkpoint, else the last below the mark
	for i, e := range entries {
		if e.phys+e.size > mark.Offset {
			break
		}
		if vi = i; e.phys >= cpFlushed {
			break
		}
	}
	if vi < 0 || vi == len(entries)-1 {
		t.Fatalf("no record below the mark %d with records after it (%d entries)", mark.Offset, len(entries))
	}
	victim := entries[vi]
	seg, err := os.ReadFile(victim.file)
	if err != nil {
		t.Fatal(err)
	}
	lost := map[string]bool{}
	for _, v := range killValueRE.FindAll(seg[victim.pos:victim.pos+victim.size], -1) {
		lost[string(v)] = true
	}
	seg[victim.pos+victim.size/2] ^= 0x20
	if err := os.WriteFile(victim.file, seg, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acknowledged; checkpoint flushed %d, flushed mark %d, log end %d; flipped a byte of the record at %d (%d bytes, %d messages)",
		len(want), cpFlushed, mark.Offset, entries[len(entries)-1].phys+entries[len(entries)-1].size, victim.phys, victim.size, len(lost))

	// The start refuses, naming the record, and changes nothing.
	p = startKillServe(t, dir)
	if addr := p.kafkaAddr(t); addr != "" {
		t.Fatalf("keel serve started on damaged durable data instead of refusing:\n%s", p.logs.String())
	}
	out := p.logs.String()
	for _, s := range []string{"refusing to open", fmt.Sprintf("at offset %d", victim.phys), "fdatasynced before the crash", "--repair-corruption"} {
		if !strings.Contains(out, s) {
			t.Fatalf("the refusal does not say %q:\n%s", s, out)
		}
	}
	if after, _ := os.ReadFile(victim.file); !bytes.Equal(after, seg) {
		t.Fatal("a refused start changed the segment")
	}

	// With --repair-corruption it starts; every acknowledged message but
	// those of the damaged record is there.
	p = startKillServe(t, dir, "--repair-corruption")
	addr = p.kafkaAddr(t)
	if addr == "" {
		t.Fatalf("keel serve --repair-corruption exited:\n%s", p.logs.String())
	}
	q, _ := os.ReadDir(filepath.Join(dir, "quarantine"))
	for _, f := range q {
		if strings.HasSuffix(f.Name(), ".unsynced") {
			t.Fatalf("the repair cut an unsynced tail: %s", f.Name())
		}
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("damaged"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got := map[key]string{}
	missing := func() (n int, example string) {
		for k, v := range want {
			if _, ok := got[k]; !ok && !lost[v[:min(len(v), 10)]] {
				n, example = n+1, fmt.Sprintf("partition %d offset %d (%s)", k.partition, k.offset, v[:10])
			}
		}
		return n, example
	}
	deadline := time.Now().Add(60 * time.Second)
	for n, ex := missing(); n > 0; n, ex = missing() {
		if time.Now().After(deadline) {
			t.Fatalf("%d acknowledged messages outside the damaged record missing after the repair, e.g. %s", n, ex)
		}
		fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
		rd.PollFetches(fctx).EachRecord(func(r *kgo.Record) { got[key{r.Partition, r.Offset}] = string(r.Value) })
		fcancel()
	}
	gone := 0
	for k, v := range want {
		if g, ok := got[k]; ok && g != v {
			t.Fatalf("partition %d offset %d: acknowledged %.10q, read %.10q", k.partition, k.offset, v, g)
		} else if !ok {
			gone++
		}
	}
	if gone > len(lost) {
		t.Fatalf("%d acknowledged messages gone, the damaged record held %d", gone, len(lost))
	}
	t.Logf("after the repair: %d of %d acknowledged read back, %d lost with the damaged record", len(want)-gone, len(want), gone)
}
