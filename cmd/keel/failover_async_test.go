package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/faultproxy"
	"github.com/keelmq/keel/internal/remoting"
)

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
// the new master is cut from the controllers (its proxies to them
// are cut; role-change notifications are off, so it learns
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
	// Each broker reaches each controller through a fault proxy of its
	// own: cutting a broker's proxies cuts it from the controllers while
	// the controllers, and the other brokers, keep each other.
	const lease = time.Second // half of the detection period
	c := startCtrlCluster(t, ctrlClusterOpts{name: "AsyncCluster", role: "ASYNC_MASTER", http: true, ctrlProxies: true,
		ctrlConf: "notifyBrokerRoleChanged=false\n"})
	brokers, brokerHTTP, nsAddr, group := c.brokers, c.http, c.ns, c.group
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
	rs := &routeSender{ns: ns, topic: topic, prefix: "route"}
	sendOne := func() (bool, string) {
		body, at, addr, start, err := rs.send(ctx)
		if err != nil {
			return false, err.Error()
		}
		acked[body] = at
		sentAt[body], by[body] = start, addr
		return true, addr
	}
	defer rs.close()
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
	for _, p := range c.toCtrl[second] {
		p.Cut(faultproxy.Both)
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
	for _, p := range c.toCtrl[second] {
		p.Heal()
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
