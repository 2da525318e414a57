package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseController(t *testing.T) {
	c, unknown, err := ParseController([]byte(`
controllerStorePath = /var/lib/keel-controller
controllerDLegerPeers = n0-127.0.0.1:9877;n1-127.0.0.1:9878;n2-127.0.0.1:9879
controllerDLegerSelfId = n0
controllerListen = 127.0.0.1:9877
enableElectUncleanMaster = true
notifyBrokerRoleChanged = false
scanInactiveMasterInterval = 250
controllerHeartBeatTimeoutMills = 8000
controllerFenceTimeoutMillis = 1500
controllerDLegerGroup = group1
nope = 1
`), "controller.conf")
	if err != nil {
		t.Fatal(err)
	}
	want := &Controller{StorePath: "/var/lib/keel-controller", Peers: "n0-127.0.0.1:9877;n1-127.0.0.1:9878;n2-127.0.0.1:9879",
		SelfID: "n0", Listen: "127.0.0.1:9877", ElectUncleanMaster: true, ScanInterval: 250 * time.Millisecond,
		DetectionPeriod: 8 * time.Second, FenceTimeout: 1500 * time.Millisecond}
	if *c != *want {
		t.Fatalf("parsed %+v\nwant   %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(unknown) != 2 || unknown[0].Key != "controllerDLegerGroup" || !strings.Contains(unknown[0].Hint, "cluster id") || unknown[1].Key != "nope" {
		t.Fatalf("unknown %+v", unknown)
	}
	if a, err := c.AdvertiseAddr(); err != nil || a != "127.0.0.1:9877" {
		t.Fatalf("advertise %q %v", a, err)
	}
}

func TestControllerValueErrors(t *testing.T) {
	for _, in := range []string{"scanInactiveMasterInterval=-1", "enableElectUncleanMaster=yes", "controllerHeartBeatTimeoutMills=x",
		"controllerListen=a\ncontrollerListen=b"} {
		if _, _, err := ParseController([]byte(in), "c.conf"); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	_, _, err := ParseController([]byte("enableElectUncleanMaster=maybe"), "c.conf")
	var ve *ValueError
	if !errors.As(err, &ve) || ve.Origin != "c.conf:1" {
		t.Fatalf("value error %v", err)
	}
}

func TestControllerValidate(t *testing.T) {
	c := DefaultController()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := c.AdvertiseAddr(); err == nil {
		t.Fatal(":9878 has no host others can dial, yet AdvertiseAddr accepted it")
	}
	c.ScanInterval = time.Millisecond
	c.DetectionPeriod = 500 * time.Millisecond
	c.FenceTimeout = time.Second
	c.Listen = "nope"
	c.Advertise = ":1"
	err := c.Validate()
	for _, key := range []string{"scanInactiveMasterInterval", "controllerHeartBeatTimeoutMills", "controllerFenceTimeoutMillis", "controllerListen", "controllerAdvertise"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("Validate does not report %s: %v", key, err)
		}
	}
}

// TestControllerLeaseValidate: a lease (plus its tenth) must end within
// the detection period, which a new raft leader waits before electing.
func TestControllerLeaseValidate(t *testing.T) {
	for _, tt := range []struct {
		lease time.Duration
		ok    bool
	}{{0, true}, {3 * time.Second, true}, {5400 * time.Millisecond, true}, {5500 * time.Millisecond, false}, {50 * time.Millisecond, false}} {
		c := DefaultController()
		if err := c.Set("controllerLeaseMillis", fmt.Sprint(tt.lease.Milliseconds())); err != nil {
			t.Fatal(err)
		}
		err := c.Validate()
		if tt.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "controllerLeaseMillis") {
			t.Errorf("lease %v under a 6 s detection period: %v", tt.lease, err)
		}
	}
}
