package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/remoting"
)

// cutProxy stands in front of one controller: raft connections pass
// through, and on the brokers' remoting connections it reads every
// request frame; a connection whose requests name a replica that is cut
// (its heartbeats, registrations) is closed, and new ones are closed at
// their first such frame. So one broker loses the controllers while the
// controllers, and the other brokers, keep each other. The controllers
// advertise the proxies' addresses, so a not-leader answer redirects
// through a proxy too.
type cutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   map[int]bool
	conns map[net.Conn]int // client side -> the replica id its frames named (0: none yet)
}

var replicaIDField = regexp.MustCompile(`"replicaId":(\d+)`)

func startCutProxy(t *testing.T, addr, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, cut: map[int]bool{}, conns: map[net.Conn]int{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *cutProxy) setCut(id int, cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut[id] = cut
	if cut {
		for c, tag := range p.conns {
			if tag == id {
				c.Close()
			}
		}
	}
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *cutProxy) handle(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	p.mu.Lock()
	p.conns[c] = 0
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	go func() { io.Copy(c, up); c.Close() }()
	var l [4]byte
	if _, err := io.ReadFull(c, l[:1]); err != nil {
		return
	}
	if l[0] == 0xCE { // a raft connection (cluster-id handshake)
		if _, err := up.Write(l[:1]); err == nil {
			io.Copy(up, c)
		}
		return
	}
	// Remoting frames: a 4-byte length, then the frame.
	for {
		if _, err := io.ReadFull(c, l[1:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(l[:])
		if n > 16<<20 {
			return
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(c, frame); err != nil {
			return
		}
		if m := replicaIDField.FindSubmatch(frame); m != nil {
			id, _ := strconv.Atoi(string(m[1]))
			p.mu.Lock()
			p.conns[c] = id
			cut := p.cut[id]
			p.mu.Unlock()
			if cut {
				return
			}
		}
		if _, err := up.Write(append(l[:], frame...)); err != nil {
			return
		}
		if _, err := io.ReadFull(c, l[:1]); err != nil {
			return
		}
	}
}

// asyncAttempt is one send of a producer pinned to one broker.
type asyncAttempt struct {
	sent, done time.Time
	ok         bool
	err        string
}

// TestControllerFailoverAsyncMaster: an ASYNC_MASTER group of three keel
// broker processes in controller mode, with three keel controller
// processes and a NameServer. The master is killed with SIGKILL: a new
// one is elected and sends go on; the old one rejoins as a slave. Then
// the new master is cut from the controllers (proxies in front of them
// drop its requests; role-change notifications are off, so it learns
// nothing): it stops acknowledging once its lease ends, before the next
// master is elected, and a producer pinned to it recorded no
// acknowledgement after the first one a producer sent to its successor.
// Healed, it rejoins as a slave. What ASYNC_MASTER may lose on a
// failover (acknowledged, not yet replicated) is never more than the
// members counted as lost.
func TestControllerFailoverAsyncMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes")
	}
	ports := reserveLoopbackPorts(t, 3+3+1+3*2+3)
	ctrl, proxies, nsAddr, brokerHTTP := ports[:3], ports[3:6], ports[6], ports[13:16]
	cut := make([]*cutProxy, 3)
	for i := range cut {
		cut[i] = startCutProxy(t, proxies[i], ctrl[i])
	}
	confDir := t.TempDir()
	cconf := filepath.Join(confDir, "controller.conf")
	const lease = time.Second // half of the detection period
	if err := os.WriteFile(cconf, []byte("controllerHeartBeatTimeoutMills=2000\nscanInactiveMasterInterval=200\ncontrollerFenceTimeoutMillis=1000\n"+
		"notifyBrokerRoleChanged=false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var voters []string
	for i, p := range proxies {
		voters = append(voters, fmt.Sprintf("n%d-%s", i, p))
	}
	var cps []*controllerProc
	for i := range 3 {
		args := []string{"-c", cconf, "--node-id", fmt.Sprintf("n%d", i), "--controller-advertise", proxies[i]}
		if i == 0 {
			args = append(args, "--bootstrap="+strings.Join(voters, ";"))
		}
		cps = append(cps, startControllerProc(t, t.TempDir(), ctrl[i], args...))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, p := range cps {
				t.Logf("controller %d log:\n%s", i, p.logs.String())
			}
		}
	})
	waitFor(t, "an acting controller leader", 30*time.Second, func() bool {
		st, ok := controllerStatus(t, proxies)
		return ok && st.Acting && len(st.Voters) == 3
	})
	startKeelProc(t, "namesrv", "--namesrv-listen", nsAddr)
	bconf := filepath.Join(confDir, "broker.conf")
	if err := os.WriteFile(bconf, []byte("brokerClusterName=AsyncCluster\nbrokerName=broker-a\nbrokerRole=ASYNC_MASTER\n"+
		"enableControllerMode=true\ncontrollerAddr="+strings.Join(proxies, ";")+"\nflushDiskType=SYNC_FLUSH\n"+
		"replicaAckTimeoutMillis=2000\nkafkaListen=\namqpListen=\nbrokerIP1=127.0.0.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	brokers := make([]*failoverBroker, 3)
	for i := range brokers {
		b := &failoverBroker{dir: t.TempDir(), addr: ports[7+2*i]}
		b.args = []string{"broker", "-c", bconf, "--data-dir", b.dir, "-n", nsAddr, "--broker-listen", b.addr, "--ha-listen", ports[8+2*i],
			"--http-listen", brokerHTTP[i]}
		b.proc = startKeelProc(t, b.args...)
		brokers[i] = b
	}
	group := groupFromControllers(t, proxies, "broker-a")
	dump := func() { dumpBrokers(t, brokers) }
	g := waitMasterElected(t, brokers, group)
	first := brokerOf(t, brokers, g, g.MasterID)

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ns, err := remoting.Dial(ctx, nsAddr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	const topic = "AsyncFailoverT"
	mc, err := remoting.Dial(ctx, brokers[first].addr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.CreateTopic(ctx, mc, topic, 4); err != nil {
		t.Fatal(err)
	}
	mc.Close()

	// The producer of the route: every SEND_OK with the broker that gave
	// it and when the request left.
	acked := map[string]ackedSend{}
	sentAt := map[string]time.Time{}
	by := map[string]string{}
	var conn *remoting.Client
	connAddr := ""
	seq := 0
	sendOne := func() (bool, string) {
		_, write, err := bench.LookupRoute(ctx, ns, topic)
		if err != nil || len(write) == 0 {
			return false, fmt.Sprintf("route: %v", err)
		}
		q := write[seq%len(write)]
		if conn == nil || connAddr != q.BrokerAddr {
			if conn != nil {
				conn.Close()
			}
			dctx, dcancel := context.WithTimeout(ctx, time.Second)
			conn, err = remoting.Dial(dctx, q.BrokerAddr, remoting.ClientConfig{})
			dcancel()
			if err != nil {
				conn = nil
				return false, err.Error()
			}
			connAddr = q.BrokerAddr
		}
		body := fmt.Sprintf("route-%06d", seq)
		seq++
		start := time.Now()
		sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
		off, err := rawSend(sctx, conn, topic, q.QueueID, body)
		scancel()
		if err != nil {
			conn.Close()
			conn = nil
			return false, err.Error()
		}
		acked[body] = ackedSend{queue: q.QueueID, offset: off, at: time.Now()}
		sentAt[body], by[body] = start, q.BrokerAddr
		return true, q.BrokerAddr
	}
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	sendUntilOther := func(what, old string) time.Duration {
		t.Helper()
		start := time.Now()
		var last string
		for {
			ok, why := sendOne()
			if ok && why != old {
				return time.Since(start)
			}
			last = why
			if time.Since(start) > 40*time.Second {
				dump()
				t.Fatalf("%s: no SEND_OK of another master within 40 s; last: %s", what, last)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	sendN := func(what string, n int) {
		t.Helper()
		for range n {
			if ok, why := sendOne(); !ok {
				dump()
				t.Fatalf("send %s failed: %s", what, why)
			}
		}
	}
	waitFor(t, "the first SEND_OK (the master's first lease)", 20*time.Second, func() bool { ok, _ := sendOne(); return ok })
	sendN("before the kill", 100)

	// 1. SIGKILL of the master.
	brokers[first].proc.cmd.Process.Signal(syscall.SIGKILL)
	<-brokers[first].proc.exited
	t.Logf("failover: %v from SIGKILL of the ASYNC_MASTER to the first SEND_OK of the new master",
		sendUntilOther("after the kill", brokers[first].addr).Round(time.Millisecond))
	g = group()
	second := brokerOf(t, brokers, g, g.MasterID)
	secondID, secondEpoch := g.MasterID, g.MasterEpoch
	sendN("after the kill", 100)
	brokers[first].proc = startKeelProc(t, brokers[first].args...)
	waitFor(t, "the killed master back in the in-sync set", 30*time.Second, func() bool {
		g = group()
		return g != nil && g.MasterID == secondID && len(g.InSync) == 3
	})
	sendN("after the rejoin", 50)

	// 2. The master cut from the controllers, a producer pinned to it.
	var pmu sync.Mutex
	var pinned []asyncAttempt
	stopPinned := make(chan struct{})
	pinnedDone := make(chan struct{})
	go func() {
		defer close(pinnedDone)
		var pc *remoting.Client
		defer func() {
			if pc != nil {
				pc.Close()
			}
		}()
		for i := 0; ; i++ {
			select {
			case <-stopPinned:
				return
			default:
			}
			if pc == nil {
				dctx, dcancel := context.WithTimeout(ctx, time.Second)
				pc, _ = remoting.Dial(dctx, brokers[second].addr, remoting.ClientConfig{})
				dcancel()
				if pc == nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
			}
			a := asyncAttempt{sent: time.Now()}
			sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
			_, err := rawSend(sctx, pc, topic, int32(i%4), fmt.Sprintf("pinned-%06d", i))
			scancel()
			a.done, a.ok = time.Now(), err == nil
			if err != nil {
				a.err = err.Error()
				pc.Close()
				pc = nil
				time.Sleep(20 * time.Millisecond)
			}
			pmu.Lock()
			pinned = append(pinned, a)
			pmu.Unlock()
		}
	}()
	waitFor(t, "the pinned producer's first SEND_OK", 10*time.Second, func() bool {
		pmu.Lock()
		defer pmu.Unlock()
		return len(pinned) > 0 && pinned[len(pinned)-1].ok
	})
	cutAt := time.Now()
	for _, p := range cut {
		p.setCut(int(secondID), true)
	}
	took := sendUntilOther("after the cut", brokers[second].addr)
	g = group()
	if g.MasterID == secondID || g.MasterEpoch <= secondEpoch {
		t.Fatalf("after the cut: %+v", g)
	}
	third, thirdID := brokerOf(t, brokers, g, g.MasterID), g.MasterID
	var elected time.Time
	for _, e := range g.History {
		if e.Epoch == g.MasterEpoch {
			elected = time.UnixMilli(e.TimeMillis)
		}
	}
	sendN("after the second failover", 50)
	// The cut master, which learns nothing, goes on refusing: wait for a
	// refusal of a send made after the one in flight when its lease ended.
	waitFor(t, "the cut master's refusal for want of a lease", 15*time.Second, func() bool {
		pmu.Lock()
		defer pmu.Unlock()
		for _, a := range pinned {
			if !a.ok && a.sent.After(cutAt) && !strings.HasPrefix(a.err, "code 12:") {
				return true
			}
		}
		return false
	})
	close(stopPinned)
	<-pinnedDone

	// No overlap: the cut master's last acknowledgement came back before
	// the election, and before the first send any later master acknowledged.
	var lastOld time.Time
	var refusal string
	for _, a := range pinned {
		if a.ok {
			lastOld = a.done
		} else if a.sent.After(cutAt) && refusal == "" && !strings.HasPrefix(a.err, "code 12:") {
			// (A send in flight when the lease ended is answered
			// FLUSH_SLAVE_TIMEOUT, 12: stored, never acknowledged.)
			refusal = a.err
		}
	}
	firstNew := time.Time{}
	for body, s := range sentAt {
		// (The next master may be the one killed first: its sends of
		// epoch 1 are not this election's.)
		if by[body] == brokers[third].addr && s.After(cutAt) && (firstNew.IsZero() || s.Before(firstNew)) {
			firstNew = s
		}
	}
	t.Logf("cut at %s: the cut master's last SEND_OK came back %v after the cut (lease %v); the next master was elected %v after the cut and first sent to %v after it (first SEND_OK of the route producer %v after); first refusal: %s",
		cutAt.Format("15:04:05.000"), lastOld.Sub(cutAt).Round(time.Millisecond), lease, elected.Sub(cutAt).Round(time.Millisecond),
		firstNew.Sub(cutAt).Round(time.Millisecond), took.Round(time.Millisecond), refusal)
	switch {
	case !lastOld.Before(firstNew):
		dump()
		t.Fatalf("two masters acknowledged in overlapping windows: the cut master's last SEND_OK at %v, a send to the next master left at %v", lastOld, firstNew)
	case elected.UnixMilli() < lastOld.UnixMilli():
		dump()
		t.Fatalf("the next master was elected at %v, before the cut master's last SEND_OK at %v", elected, lastOld)
	case lastOld.Sub(cutAt) > lease+time.Second:
		dump()
		t.Fatalf("the cut master acknowledged %v after the cut, beyond its lease of %v", lastOld.Sub(cutAt), lease)
	case !strings.Contains(refusal, "code 14:") || !strings.Contains(refusal, "holds no lease"):
		t.Errorf("the cut master's first refusal: %q, want a retriable answer naming its lease", refusal)
	}

	// 3. Healed: the cut master learns of its successor and rejoins.
	for _, p := range cut {
		p.setCut(int(secondID), false)
	}
	waitFor(t, "the cut master back as a slave, in sync", 30*time.Second, func() bool {
		g = group()
		return g != nil && g.MasterID == thirdID && len(g.InSync) == 3 &&
			strings.Contains(brokers[second].proc.logs.String(), "from=master to=slave")
	})
	sendN("after the heal", 50)

	// What was lost is counted: a message acknowledged and not in the
	// final master's log was cut from a former master, which said so.
	// The console of a member shows the three elections.
	var el struct {
		ControllerMode bool `json:"controllerMode"`
		Groups         []struct {
			Group     string `json:"group"`
			Elections []struct {
				Epoch uint32 `json:"epoch"`
				Kind  string `json:"kind"`
			} `json:"elections"`
		} `json:"groups"`
	}
	resp, err := http.Get("http://" + brokerHTTP[third] + "/api/elections")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&el)
	resp.Body.Close()
	if err != nil || !el.ControllerMode || len(el.Groups) != 1 || fmt.Sprint(el.Groups[0].Elections) != "[{1 initial} {2 clean} {3 clean}]" {
		t.Fatalf("console's elections: %+v (%v)", el, err)
	}
	var lost float64
	for _, h := range brokerHTTP {
		m := scrapeSeries("http://" + h + "/metrics")
		lost += m["keel_controlled_lost_records_total"]
	}
	for i := range brokers {
		brokers[i].proc.cmd.Process.Signal(syscall.SIGTERM)
		<-brokers[i].proc.exited
	}
	at := storedAt(t, brokers[third].dir, topic)
	kept := map[string]ackedSend{}
	missing := 0
	for body, a := range acked {
		if at[[2]int64{int64(a.queue), a.offset}] == body {
			kept[body] = a
		} else {
			missing++
		}
	}
	t.Logf("%d acknowledged by the route producer, %d not in the final master's log; %v records counted as lost", len(acked), missing, lost)
	if float64(missing) > lost {
		dump()
		t.Fatalf("%d acknowledged messages are missing, and only %v were counted as lost", missing, lost)
	}
	for i := range brokers {
		checkAcked(t, brokers[i].dir, topic, kept)
	}
	if bytes.Contains([]byte(brokers[second].proc.logs.String()), []byte("replica log diverged")) {
		dump()
		t.Fatal("a former master stopped on a diverged log")
	}
}
