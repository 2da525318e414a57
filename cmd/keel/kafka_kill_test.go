package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// startKafkaServeProc runs keel serve as a child process on dir with only
// the Kafka door on a free loopback port, and returns it with that address
// and a channel closed once it has exited.
func startKafkaServeProc(t *testing.T, dir string) (*exec.Cmd, string, <-chan struct{}) {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(os.Args[0], "serve", "--data-dir", dir, "--namesrv-listen", "127.0.0.1:0",
		"--kafka-listen", "127.0.0.1:0", "--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--http-listen", "",
		"-c", writeConf(t, "flushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n"))
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN=1")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	var addr string
	waitFor(t, "the Kafka listener", 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("keel serve exited before listening:\n%s", logs.String())
		default:
		}
		if m := kafkaListenRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return cmd, addr, exited
}

// TestKafkaAcksAllSurvivesKill9 is the Kafka door's "kill -9 under acks=all
// sends loses nothing acknowledged" with a real process: franz-go
// producers send with acks=all while keel serve is killed with SIGKILL;
// after a restart every record whose produce was acknowledged is there, at
// the offset the acknowledgement gave, with its value.
func TestKafkaAcksAllSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	cmd, addr, exited := startKafkaServeProc(t, dir)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.AllowAutoTopicCreation(),
		kgo.ProducerLinger(0), kgo.RecordRetries(0), kgo.ProduceRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Create the topic first, so the records race only the kill.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "killed", Value: []byte("first")}).FirstErr(); err != nil {
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
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				v := fmt.Sprintf("w%d-%d", w, i)
				r := &kgo.Record{Topic: "killed", Value: []byte(v)}
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
		}(w)
	}
	waitFor(t, "500 acknowledged records", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 500
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited // its data directory lock goes with it
	close(stop)
	wg.Wait()
	cl.Close()
	mu.Lock()
	want := make(map[key]string, len(acked))
	for k, v := range acked {
		want[k] = v
	}
	mu.Unlock()
	t.Logf("%d records acknowledged before the kill", len(want))

	_, addr, _ = startKafkaServeProc(t, dir)
	rd, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("killed"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got := map[key]string{}
	waitFor(t, "every acknowledged record after the restart", 60*time.Second, func() bool {
		fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer fcancel()
		fs := rd.PollFetches(fctx)
		fs.EachRecord(func(r *kgo.Record) { got[key{r.Partition, r.Offset}] = string(r.Value) })
		for k := range want {
			if _, ok := got[k]; !ok {
				return false
			}
		}
		return true
	})
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("partition %d offset %d: acknowledged %q, read %q after the kill", k.partition, k.offset, v, got[k])
		}
	}
}
