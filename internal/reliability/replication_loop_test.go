package reliability

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/record"
)

// member is one broker of a replicated group, restarted on the same data
// directory and addresses.
type member struct {
	name, dir, conf, addr string
	p                     *proc
}

// groupN is a NameServer, a SYNC_MASTER and n slaves as keel processes.
type groupN struct {
	nsAddr, haAddr string
	master         member
	slaves         []member
}

const loopSegBytes = 16 << 20

// startGroupN starts the group; the first slave knows the master's HA
// address from its broker.conf, the others from the NameServer.
func startGroupN(t *testing.T, slaves, minISR int) *groupN {
	g := &groupN{}
	ns := startProc(t, "namesrv", "namesrv", "--namesrv-listen", "127.0.0.1:0")
	g.nsAddr = ns.await(nsListenRE)
	common := fmt.Sprintf("brokerClusterName=c\nbrokerName=broker-a\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=%d\n"+
		"minInSyncReplicas=%d\nreplicaAckTimeoutMillis=1000\n", loopSegBytes, minISR)
	dir := t.TempDir()
	g.master = member{name: "master", dir: filepath.Join(dir, "master"), conf: filepath.Join(dir, "master.conf"), addr: "127.0.0.1:0"}
	os.WriteFile(g.master.conf, []byte(common+"brokerRole=SYNC_MASTER\nbrokerId=0\n"), 0o600)
	g.haAddr = "127.0.0.1:0"
	g.startMaster(t)
	for i := range slaves {
		s := member{name: fmt.Sprint("slave", i+1), dir: filepath.Join(dir, fmt.Sprint("slave", i+1)),
			conf: filepath.Join(dir, fmt.Sprint("slave", i+1, ".conf")), addr: "127.0.0.1:0"}
		conf := common + fmt.Sprintf("brokerRole=SLAVE\nbrokerId=%d\n", i+1)
		if i == 0 {
			conf += "haMasterAddress=" + g.haAddr + "\n"
		}
		os.WriteFile(s.conf, []byte(conf), 0o600)
		g.slaves = append(g.slaves, s)
		g.startSlave(t, i)
	}
	return g
}

func (g *groupN) startMaster(t *testing.T) {
	m := &g.master
	m.p = startProc(t, m.name, "broker", "-n", g.nsAddr, "-c", m.conf, "--data-dir", m.dir,
		"--broker-listen", m.addr, "--ha-listen", g.haAddr, "--http-listen", "")
	g.haAddr = m.p.await(haListenRE)
	m.addr = m.p.await(brListenRE)
}

func (g *groupN) startSlave(t *testing.T, i int) {
	s := &g.slaves[i]
	s.p = startProc(t, s.name, "broker", "-n", g.nsAddr, "-c", s.conf, "--data-dir", s.dir,
		"--broker-listen", s.addr, "--http-listen", "")
	s.addr = s.p.await(brListenRE)
}

// inSync waits until the master reports every slave in sync.
func (g *groupN) inSync(t *testing.T) {
	want := regexp.MustCompile(`"keelReplicationInSyncReplicas":"` + strconv.Itoa(1+len(g.slaves)) + `"`)
	waitFor(t, 60*time.Second, "every slave in sync", func() bool {
		resp, err := invoke(g.master.addr, remoting.ReqGetBrokerRuntimeInfo, nil, nil)
		return err == nil && resp.Code == remoting.ResSuccess && want.Match(resp.Body)
	})
}

// caughtUp waits until every slave's lag is 0 (nothing is being sent).
func (g *groupN) caughtUp(t *testing.T) {
	g.inSync(t)
	waitFor(t, 60*time.Second, "every slave caught up", func() bool {
		resp, err := invoke(g.master.addr, remoting.ReqGetBrokerRuntimeInfo, nil, nil)
		if err != nil || resp.Code != remoting.ResSuccess {
			return false
		}
		for i := range g.slaves {
			if !regexp.MustCompile(`"keelReplicationReplica` + strconv.Itoa(i+1) + `LagBytes":"0"`).Match(resp.Body) {
				return false
			}
		}
		return true
	})
}

type sentMsg struct {
	queue int32
	qo    int64
}

// produce sends from 4 goroutines until stop or the master is gone,
// recording every SEND_OK under its body.
func produce(addr, prefix string, acked map[string]sentMsg, mu *sync.Mutex, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				q := int32(w % 2)
				body := fmt.Sprintf("%s-w%d-%d", prefix, w, i)
				resp, err := sendOne(addr, "K", q, body)
				if err != nil {
					return // the master is gone
				}
				if resp.Code != remoting.ResSuccess {
					continue
				}
				qo, _ := strconv.ParseInt(resp.ExtFields["queueOffset"], 10, 64)
				mu.Lock()
				acked[body] = sentMsg{q, qo}
				mu.Unlock()
			}
		}()
	}
	return &wg
}

// openOffline opens a stopped member's store (a slave's as a replica).
func openOffline(t *testing.T, dir string, replica bool) *store.Store {
	t.Helper()
	cfg := store.DefaultConfig(dir)
	cfg.CommitLogSegmentBytes = loopSegBytes
	cfg.Replica = replica
	st, err := store.Open(cfg)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return st
}

// scanLog reads every record of st's CommitLog, each verified (size, CRC),
// and returns topic K's messages by body.
func scanLog(t *testing.T, st *store.Store) map[string]sentMsg {
	t.Helper()
	got := map[string]sentMsg{}
	var buf []byte
	for pos, end := st.Stats().MinOffset, st.Offset(store.Written); pos < end; {
		raw, next, err := st.ReadReplication(pos, 0, 1<<20, buf)
		if err != nil {
			t.Fatalf("read the log at %d: %v", pos, err)
		}
		if _, err := commitlog.WalkRaw(raw, pos, loopSegBytes, func(_ int64, e []byte, blank bool) error {
			if blank {
				return nil
			}
			if record.TypeOfMagic(int32(binary.BigEndian.Uint32(e[4:8]))) != record.RocketMQ {
				return nil // metadata (system records) travels in the log too
			}
			v := message.View(e[:len(e)-commitlog.TrailerBytes])
			if string(v.Topic()) == "K" {
				got[string(v.Body())] = sentMsg{v.QueueID(), v.QueueOffset()}
			}
			return nil
		}); err != nil {
			t.Fatalf("the log at %d: %v", pos, err)
		}
		pos, buf = next, raw
	}
	return got
}

// sameCommitLogs fails unless a and b hold the same bytes up to the
// shorter's end, and that end is both's.
func sameCommitLogs(t *testing.T, what string, a, b *store.Store) {
	t.Helper()
	wa, wb := a.Offset(store.Written), b.Offset(store.Written)
	if wa != wb {
		t.Fatalf("%s: the logs end at %d and %d", what, wa, wb)
	}
	var ba, bb []byte
	for pos := int64(0); pos < wa; {
		ra, na, err1 := a.ReadReplication(pos, 0, 1<<20, ba)
		rb, nb, err2 := b.ReadReplication(pos, 0, 1<<20, bb)
		if err1 != nil || err2 != nil || na != nb || !bytes.Equal(ra, rb) || na == pos {
			t.Fatalf("%s: the CommitLogs differ in the range at %d (%v %v, ends %d %d)", what, pos, err1, err2, na, nb)
		}
		pos, ba, bb = na, ra, rb
	}
}

// TestSyncMasterKillLoop: a SYNC_MASTER is killed with SIGKILL while four
// producers send, again and again, and restarted on its data directory.
// After each kill every message it answered SEND_OK is on every slave,
// intact (read back from the slave's CommitLog with its CRC checked); after
// the last round the master's and the slaves' CommitLogs are
// byte-identical. One slave for two rounds, two slaves (one knowing the
// master from the NameServer only, minInSyncReplicas 3) for one; with
// KEEL_LONG=1, 20 rounds each.
func TestSyncMasterKillLoop(t *testing.T) {
	for _, tc := range []struct {
		name           string
		slaves, rounds int
	}{{"one slave", 1, 2}, {"two slaves", 2, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			if long() {
				tc.rounds = 20
			}
			killLoop(t, tc.slaves, tc.rounds)
		})
	}
}

func killLoop(t *testing.T, slaves, rounds int) {
	g := startGroupN(t, slaves, 1+slaves)
	acked := map[string]sentMsg{}
	var mu sync.Mutex
	for round := range rounds {
		g.inSync(t)
		stop := make(chan struct{})
		wg := produce(g.master.addr, fmt.Sprint("r", round), acked, &mu, stop)
		mu.Lock()
		target := len(acked) + 150
		mu.Unlock()
		waitFor(t, 60*time.Second, "150 more acknowledged sends", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= target })
		g.master.p.signal(syscall.SIGKILL)
		close(stop)
		wg.Wait()

		for i := range g.slaves {
			s := &g.slaves[i]
			if err := s.p.signal(syscall.SIGTERM); err != nil {
				t.Fatalf("round %d: %s exit: %v\n%s", round, s.name, err, tail(s.p.logs(), 4000))
			}
			st := openOffline(t, s.dir, true)
			held := scanLog(t, st)
			st.Close()
			mu.Lock()
			for body, a := range acked {
				if h, ok := held[body]; !ok || h != a {
					mu.Unlock()
					t.Fatalf("round %d: acknowledged %s (queue %d offset %d) is not on %s (found %v %v)", round, body, a.queue, a.qo, s.name, h, ok)
				}
			}
			mu.Unlock()
		}
		t.Logf("round %d: %d acknowledged sends, all on the %d slaves", round, len(acked), len(g.slaves))
		g.startMaster(t)
		for i := range g.slaves {
			g.startSlave(t, i)
		}
		waitFor(t, 60*time.Second, "SEND_OK after the restart", func() bool {
			resp, err := sendOne(g.master.addr, "K", 0, fmt.Sprint("after-", round))
			if err == nil && resp.Code == remoting.ResSuccess {
				mu.Lock()
				qo, _ := strconv.ParseInt(resp.ExtFields["queueOffset"], 10, 64)
				acked[fmt.Sprint("after-", round)] = sentMsg{0, qo}
				mu.Unlock()
				return true
			}
			return false
		})
	}

	g.caughtUp(t)
	for i := range g.slaves {
		if err := g.slaves[i].p.signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.master.p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	m := openOffline(t, g.master.dir, false)
	defer m.Close()
	for i := range g.slaves {
		st := openOffline(t, g.slaves[i].dir, true)
		sameCommitLogs(t, g.slaves[i].name, m, st)
		st.Close()
	}
}

// TestSlaveFollowsMovedMaster: a slave without haMasterAddress follows
// its master to a new HA port: the master restarts listening elsewhere,
// the slave's lost link makes it register again, and the NameServer's
// answer names the new address; the SYNC_MASTER (minInSyncReplicas 2)
// then acknowledges sends with that slave in sync. (The other slave,
// configured with the old address, stays out.)
func TestSlaveFollowsMovedMaster(t *testing.T) {
	g := startGroupN(t, 2, 2)
	g.inSync(t)
	old := g.haAddr
	g.master.p.signal(syscall.SIGTERM)
	g.haAddr = "127.0.0.1:0"
	g.startMaster(t)
	if g.haAddr == old {
		t.Skip("the new HA listener got the old port")
	}
	inSync2 := regexp.MustCompile(`"keelReplicationReplica2InSync":"true"`)
	waitFor(t, 20*time.Second, "the NameServer-only slave in sync with the moved master (sooner than the 30 s re-registration)", func() bool {
		resp, err := invoke(g.master.addr, remoting.ReqGetBrokerRuntimeInfo, nil, nil)
		return err == nil && resp.Code == remoting.ResSuccess && inSync2.Match(resp.Body)
	})
	waitFor(t, 30*time.Second, "SEND_OK after the move", func() bool {
		resp, err := sendOne(g.master.addr, "K", 0, "moved")
		return err == nil && resp.Code == remoting.ResSuccess
	})
	if !regexp.MustCompile(`the master's HA address changed" component=replication from=` + regexp.QuoteMeta(old) + ` to=` +
		regexp.QuoteMeta(g.haAddr)).MatchString(g.slaves[1].p.logs()) {
		t.Fatalf("slave2 did not follow %s -> %s:\n%s", old, g.haAddr, tail(g.slaves[1].p.logs(), 3000))
	}
}
