package namesrv

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
)

// TestMasterEpochNeverTwoMasters: a brokerId 0 registration of a higher
// masterEpoch replaces the group's master at once; one of a lower epoch
// (the replaced master, still believing it leads) is refused with an
// error and changes nothing, also after the group left the routes; the
// replaced master registering as a slave is served as one.
func TestMasterEpochNeverTwoMasters(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	oldCl, newCl := dial(t, addr), dial(t, addr)
	old := Registration{Cluster: "C", BrokerName: "broker-a", BrokerAddr: "10.0.0.1:10911", HAServerAddr: "10.0.0.1:10912",
		Topics: topics("T"), MasterEpoch: 1}
	register(t, oldCl, old)
	nw := Registration{Cluster: "C", BrokerName: "broker-a", BrokerAddr: "10.0.0.2:10911", HAServerAddr: "10.0.0.2:10912",
		BrokerID: 1, Topics: topics("T")}
	register(t, newCl, nw) // a slave first
	nw.BrokerID, nw.MasterEpoch = 0, 2
	register(t, newCl, nw) // elected at epoch 2

	masters := func() map[string]string {
		t.Helper()
		_, body := routeOf(t, oldCl, "T")
		var rd topicRouteData
		if err := json.Unmarshal([]byte(body), &rd); err != nil {
			t.Fatalf("route %s: %v", body, err)
		}
		if len(rd.BrokerDatas) != 1 {
			t.Fatalf("route %s", body)
		}
		return rd.BrokerDatas[0].BrokerAddrs
	}
	if got := masters(); got["0"] != "10.0.0.2:10911" || len(got) != 1 {
		t.Fatalf("after the election: %v", got)
	}
	ctx := context.Background()
	_, err := RegisterBrokerResult(ctx, oldCl, old)
	if err == nil || !strings.Contains(err.Error(), "a master at epoch 2 is registered") {
		t.Fatalf("stale master's registration: %v", err)
	}
	noEpoch := old
	noEpoch.MasterEpoch = 0
	if _, err := RegisterBrokerResult(ctx, oldCl, noEpoch); err == nil {
		t.Fatal("a master registration without an epoch was accepted after one at epoch 2")
	}
	if got := masters(); got["0"] != "10.0.0.2:10911" || len(got) != 1 {
		t.Fatalf("after the stale registration: %v", got)
	}
	// The group leaves the routes (its master unregisters); the stale
	// master is still ignored.
	ctx2, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if err := UnregisterBroker(ctx2, newCl, nw); err != nil {
		t.Fatal(err)
	}
	if _, err := RegisterBrokerResult(ctx, oldCl, old); err == nil {
		t.Fatal("stale master accepted once the group had no master")
	}
	if resp, _ := routeOf(t, oldCl, "T"); resp.Code == 0 {
		t.Fatalf("route served with no master: %s", resp.Body)
	}
	// As a slave, it is served (and told who the master is).
	register(t, newCl, nw)
	old.BrokerID, old.MasterEpoch = 1, 0
	if res := register(t, oldCl, old); res.MasterAddr != "10.0.0.2:10911" {
		t.Fatalf("rejoining slave told %+v", res)
	}
	if got := masters(); got["0"] != "10.0.0.2:10911" || got["1"] != "10.0.0.1:10911" {
		t.Fatalf("after the rejoin: %v", got)
	}
}

// TestMasterEpochsKept: the epochs a previous run kept refuse a stale
// master at once; a raised epoch is saved before the registration is
// applied, and a failed save refuses it and changes nothing.
func TestMasterEpochsKept(t *testing.T) {
	var mu sync.Mutex // the server saves on its goroutines
	var saved []map[string]uint32
	fail := false
	setFail := func(f bool) { mu.Lock(); fail = f; mu.Unlock() }
	savedNow := func() []map[string]uint32 { mu.Lock(); defer mu.Unlock(); return saved }
	_, addr := startNamesrv(t, Config{MasterEpochs: map[string]uint32{"broker-a": 5},
		SaveMasterEpochs: func(e map[string]uint32) error {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return errors.New("disk gone")
			}
			saved = append(saved, e)
			return nil
		}})
	cl := dial(t, addr)
	ctx := context.Background()
	reg := Registration{Cluster: "C", BrokerName: "broker-a", BrokerAddr: "10.0.0.1:10911", Topics: topics("T"), MasterEpoch: 4}
	if _, err := RegisterBrokerResult(ctx, cl, reg); err == nil || !strings.Contains(err.Error(), "a master at epoch 5 is registered") {
		t.Fatalf("a master below the kept epoch: %v", err)
	}
	reg.MasterEpoch = 5
	register(t, cl, reg) // the kept epoch itself: nothing to save
	if s := savedNow(); len(s) != 0 {
		t.Fatalf("saved %v without a raise", s)
	}
	setFail(true)
	reg.BrokerAddr, reg.MasterEpoch = "10.0.0.2:10911", 6
	if _, err := RegisterBrokerResult(ctx, cl, reg); err == nil || !strings.Contains(err.Error(), "not kept") {
		t.Fatalf("a raise that could not be saved: %v", err)
	}
	if _, body := routeOf(t, cl, "T"); !strings.Contains(body, "10.0.0.1:10911") || strings.Contains(body, "10.0.0.2") {
		t.Fatalf("route after the refused raise: %s", body)
	}
	setFail(false)
	register(t, cl, reg)
	if s := savedNow(); len(s) != 1 || s[0]["broker-a"] != 6 {
		t.Fatalf("saved %v, want broker-a at 6", s)
	}
}
