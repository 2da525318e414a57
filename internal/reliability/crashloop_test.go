package reliability

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
)

// Crash-loop geometry: small segments so that CommitLog and ConsumeQueue
// files roll over while the broker is being killed.
const (
	crashSegmentBytes = 1 << 20
	crashCQEntries    = 1000
	crashMaxMsgBytes  = 64 << 10
	crashQueues       = 4
	crashTopic        = "CrashLoop"
)

func crashConf(t *testing.T, flush string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broker.conf")
	conf := fmt.Sprintf("brokerName=broker-crash\nflushDiskType=%s\nmapedFileSizeCommitLog=%d\n"+
		"mapedFileSizeConsumeQueue=%d\nmaxMessageSize=%d\n", flush, crashSegmentBytes, crashCQEntries*20, crashMaxMsgBytes)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// seed returns KEEL_SEED if set, else a fresh seed; the test logs it.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("KEEL_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KEEL_SEED %q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

func crashRounds() int {
	if long() {
		return 200
	}
	return 25
}

// TestCrashLoopSyncFlush: under SYNC_FLUSH, SIGKILL at random moments
// loses no acknowledged message, stores none twice unless its send was
// retried, keeps per-queue order and damages nothing.
func TestCrashLoopSyncFlush(t *testing.T) {
	v := runCrashLoop(t, "SYNC_FLUSH", crashRounds())
	if v.lost != 0 {
		t.Errorf("SYNC_FLUSH lost %d acknowledged messages", v.lost)
	}
}

// TestCrashLoopAsyncFlush: under ASYNC_FLUSH a process kill keeps the page
// cache, so the documented loss window for a process crash is zero
// messages (store package doc: "a process crash loses nothing"); only a
// power loss can lose up to one flushIntervalCommitLog of acknowledged
// messages (TestPowerLoss* covers that).
func TestCrashLoopAsyncFlush(t *testing.T) {
	v := runCrashLoop(t, "ASYNC_FLUSH", crashRounds())
	if v.lost != 0 {
		t.Errorf("ASYNC_FLUSH lost %d acknowledged messages to SIGKILL; the documented window for a process crash is 0", v.lost)
	}
}

func runCrashLoop(t *testing.T, flush string, rounds int) verdict {
	s := seed(t)
	t.Logf("seed %d (rerun with KEEL_SEED)", s)
	rng := rand.New(rand.NewPCG(s, 1))
	began := time.Now()
	p := newKeelProc(t, crashConf(t, flush))
	p.start()
	createTopic(t, p.brAddr, p.nsAddr, crashTopic, crashQueues)

	w := newWorkload(t, p, crashTopic, crashQueues)
	defer w.close()
	w.startGoProducers(3)
	w.startRawProducers(2)
	w.startConsumer("cg-crash")

	for r := range rounds {
		base := w.led.ackCount()
		waitFor(t, 60*time.Second, fmt.Sprintf("acknowledged sends in round %d", r), func() bool {
			return w.led.ackCount() >= base+10
		})
		// The kill point: a random moment while sends are in flight. In the
		// long mode every tenth round also outlives the broker's consumer
		// offset flush interval (5 s), so some offsets become durable.
		pause := time.Duration(rng.IntN(300)) * time.Millisecond
		if long() && rng.IntN(10) == 0 {
			pause += 6 * time.Second
		}
		time.Sleep(pause)
		// Every fifth round the consumer leaves just before the kill: its
		// final offset commit reaches the broker's memory but not its disk,
		// so the next consumer gets some messages again (at-least-once).
		restart := r%5 == 4
		if restart {
			w.stopConsumer()
		}
		p.kill()
		p.start()
		if restart {
			w.startConsumer(w.group)
			w.consumerRestarts++
		}
	}
	base := w.led.ackCount()
	waitFor(t, 60*time.Second, "acknowledged sends after the last restart", func() bool { return w.led.ackCount() >= base+10 })
	w.stopProducers()
	consumed := poll(90*time.Second, func() bool { return w.led.unconsumed() == 0 })
	w.close()
	p.stop()

	code, out := p.check()
	if code != 0 {
		t.Errorf("keel check after %d kills: exit %d\n%s", rounds, code, tail(out, 4000))
	}
	cfg := store.DefaultConfig(p.dir)
	cfg.CommitLogSegmentBytes = crashSegmentBytes
	cfg.ConsumeQueueSegmentEntries = crashCQEntries
	cfg.MaxMessageBytes = crashMaxMsgBytes
	w.led.mu.Lock()
	ids := make([]string, len(w.led.acks))
	for i, a := range w.led.acks {
		ids[i] = a.offsetMsgID
	}
	w.led.mu.Unlock()
	v := judge(t, w.led, readLog(t, cfg, crashTopic, ids))
	if !consumed {
		t.Errorf("the consumer did not receive %d acknowledged messages within 90s", v.unconsumed)
	}
	for _, bad := range []struct {
		n    int
		what string
	}{{v.misplaced, "misplaced"}, {v.badMsgID, "bad msgId"}, {v.unexplainedDup, "unexplained duplicates"},
		{v.orderErrors, "order errors"}, {v.corrupt, "corrupt records"}} {
		if bad.n != 0 {
			t.Errorf("%d %s", bad.n, bad.what)
		}
	}
	w.led.mu.Lock()
	sendErrors, abandoned, deliveries := w.led.errors, w.led.abandoned, w.led.deliveries
	w.led.mu.Unlock()
	t.Logf("SUMMARY crashloop flush=%s seed=%d rounds=%d sigkills=%d %s send_errors=%d abandoned=%d deliveries=%d consumer_restarts=%d elapsed=%v",
		flush, s, rounds, rounds, v, sendErrors, abandoned, deliveries, w.consumerRestarts, time.Since(began).Round(time.Second))
	return v
}
