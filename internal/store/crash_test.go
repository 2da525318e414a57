package store

import (
	"bufio"
	"context"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

const crashChildEnv = "KEEL_STORE_CRASH_CHILD_DIR"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crashConfig(dir string) Config {
	cfg := DefaultConfig(dir)
	cfg.FS = vfs.OS{}
	cfg.FlushDiskType = SyncFlush
	cfg.CommitLogSegmentBytes = 256 << 10
	cfg.ConsumeQueueSegmentEntries = 500
	cfg.MaxMessageBytes = 16 << 10
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 1024, 4096
	cfg.FlushConsumeQueueInterval = 20 * time.Millisecond
	cfg.DiskHardLimitRatio = 100
	cfg.DiskMaxUsedSpaceRatio = 100
	return cfg
}

// TestHelperProcess is the child of TestCrashWithRealProcess: it appends
// with SYNC_FLUSH from many goroutines and prints one line per
// acknowledged message until it is killed.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("only run as the child of TestCrashWithRealProcess")
	}
	s, err := Open(crashConfig(dir))
	if err != nil {
		fmt.Fprintf(os.Stdout, "OPENERR %v\n", err)
		os.Exit(3)
	}
	os.Stdout.WriteString("READY\n")
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			for i := 0; ; i++ {
				body := fmt.Sprintf("%d-%d-%s", w, i, strings.Repeat("p", rng.IntN(3000)))
				m := newMsg(fmt.Sprintf("C%d", rng.IntN(3)), int32(rng.IntN(4)), body, map[string]string{"KEYS": fmt.Sprintf("k%d-%d-%d", os.Getpid(), w, i)})
				r := s.PutMessage(context.Background(), m)
				if r.Status != PutOK {
					fmt.Fprintf(os.Stdout, "PUTERR %v %v\n", r.Status, r.Err)
					os.Exit(4)
				}
				line := fmt.Sprintf("ACK %s %d %d %d %d\n", m.Topic, m.QueueID, m.QueueOffset, m.PhysOffset, crc32.Checksum(m.Body, castagnoli))
				mu.Lock()
				os.Stdout.WriteString(line) // one write per line: never torn by the kill
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

type crashAck struct {
	topic    string
	qid      int32
	qo, phys int64
	bodyCRC  uint32
}

func TestCrashWithRealProcess(t *testing.T) {
	rounds := 20
	if longRun() {
		rounds = 100
	}
	if testing.Short() {
		rounds = 3
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	var all []crashAck
	for round := range rounds {
		acks, out := runAndKill(t, dir, time.Duration(rng.IntN(300))*time.Millisecond)
		if strings.Contains(out, "ERR") {
			t.Fatalf("seed %d round %d: child failed: %s", seed, round, out)
		}
		all = append(all, acks...)
		check := acks // earlier rounds' messages: all checked in the last round
		if round == rounds-1 {
			check = all
		}
		s, err := Open(crashConfig(dir))
		if err != nil {
			t.Fatalf("seed %d round %d: reopen after SIGKILL: %v", seed, round, err)
		}
		what := fmt.Sprintf("seed %d round %d", seed, round)
		checkCrashAcks(t, s, check, what)
		checkConsistent(t, s, what)
		if err := s.Close(); err != nil {
			t.Fatalf("%s: close: %v", what, err)
		}
		if round%5 != 4 {
			continue
		}
		if rep, err := Check(crashConfig(dir)); err != nil || !rep.OK() || len(rep.Warnings) > 0 {
			t.Fatalf("%s: check after a clean close: %v %v %v", what, err, rep.Problems, rep.Warnings)
		}
	}
	t.Logf("%d rounds, %d acknowledged messages checked", rounds, len(all))
}

// runAndKill starts the child, SIGKILLs it after delay and returns the
// acknowledged messages it reported, and its other output.
func runAndKill(t *testing.T, dir string, delay time.Duration) ([]crashAck, string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acks []crashAck
	var other strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var a crashAck
			if _, err := fmt.Sscanf(sc.Text(), "ACK %s %d %d %d %d", &a.topic, &a.qid, &a.qo, &a.phys, &a.bodyCRC); err == nil {
				acks = append(acks, a)
			} else if sc.Text() != "READY" {
				other.WriteString(sc.Text() + "\n")
			}
		}
	}()
	time.Sleep(delay)
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
	cmd.Wait()
	return acks, other.String()
}

func checkCrashAcks(t *testing.T, s *Store, acks []crashAck, what string) {
	t.Helper()
	for _, a := range acks {
		r, err := s.GetMessage(a.topic, a.qid, a.qo, 1, 1<<20, nil)
		if err != nil || r.Status != Found {
			t.Fatalf("%s: acknowledged %s/%d@%d: %v %v", what, a.topic, a.qid, a.qo, r, err)
		}
		v := message.View(r.Records[0])
		if v.PhysOffset() != a.phys || crc32.Checksum(v.Body(), castagnoli) != a.bodyCRC {
			t.Fatalf("%s: acknowledged %s/%d@%d differs", what, a.topic, a.qid, a.qo)
		}
		r.Release()
	}
}
