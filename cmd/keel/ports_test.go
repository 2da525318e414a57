package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Ports for processes a test starts later. A port is free when chosen and
// is bound by its process seconds after (a voter list names every voter
// before any of them starts, a script builds keel first, a broker killed
// comes back on its port). So the ports lie outside the kernel's
// ephemeral range, which every outgoing connection on the machine and
// every listener on port 0 draw from, and each is locked for the test's
// life (flock on a file in the temporary directory) against every other
// test process reserving ports here (the lock files stay, empty, one per
// port ever reserved: removing one would let two processes lock two files
// of one name).

// reserveLoopbackPorts returns n loopback addresses reserved for the
// test, every port distinct.
func reserveLoopbackPorts(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 100*n {
			t.Fatalf("only %d of %d free loopback ports found outside the ephemeral range", len(addrs), n)
		}
		p := randomPortBase(t, 1)
		release, ok := claimPort(p)
		if !ok {
			continue
		}
		t.Cleanup(release)
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	return addrs
}

// freePortRange returns a base port whose n consecutive ports are
// reserved for the test, for a script that numbers its ports from a base.
func freePortRange(t *testing.T, n int) int {
	t.Helper()
	for range 200 {
		base := randomPortBase(t, n)
		var releases []func()
		for p := base; p < base+n; p++ {
			release, ok := claimPort(p)
			if !ok {
				break
			}
			releases = append(releases, release)
		}
		if len(releases) == n {
			for _, r := range releases {
				t.Cleanup(r)
			}
			return base
		}
		for _, r := range releases {
			r()
		}
	}
	t.Fatalf("no %d free consecutive loopback ports outside the ephemeral range", n)
	return 0
}

// randomPortBase picks a base port at random whose n ports from it lie
// from 10000 to 65535 and outside the ephemeral range.
func randomPortBase(t *testing.T, n int) int {
	t.Helper()
	lo, hi := ephemeralPortRange()
	var spans [][2]int // candidate bases, inclusive
	if first, last := 10000, lo-n; last >= first {
		spans = append(spans, [2]int{first, last})
	}
	if first, last := max(hi+1, 10000), 65535-n+1; last >= first {
		spans = append(spans, [2]int{first, last})
	}
	total := 0
	for _, sp := range spans {
		total += sp[1] - sp[0] + 1
	}
	if total == 0 {
		t.Fatalf("no room for %d ports outside the ephemeral range %d-%d", n, lo, hi)
	}
	k := rand.IntN(total)
	for _, sp := range spans {
		size := sp[1] - sp[0] + 1
		if k < size {
			return sp[0] + k
		}
		k -= size
	}
	panic("unreachable")
}

// ephemeralPortRange is the kernel's range of local ports for outgoing
// connections and listeners on port 0: Linux's
// net.ipv4.ip_local_port_range, its default where that cannot be read.
func ephemeralPortRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l > h {
		return lo, hi
	}
	return l, h
}

// claimPort locks port p for this process (no other reservation, here or
// in another process, gets it until release) if the lock is free and the
// port can be bound on loopback now.
func claimPort(p int) (release func(), ok bool) {
	dir := filepath.Join(os.TempDir(), "keel-test-ports")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		f.Close()
		return nil, false
	}
	ln.Close()
	return func() { f.Close() }, true // closing the file drops the lock
}

// TestReservedPortsOutsideEphemeral: reserved ports are distinct, outside
// the ephemeral range, bindable, and locked against another reservation
// until the test ends.
func TestReservedPortsOutsideEphemeral(t *testing.T) {
	lo, hi := ephemeralPortRange()
	outside := func(first, last int) error {
		if first <= hi && last >= lo {
			return fmt.Errorf("ports %d-%d overlap the ephemeral range %d-%d", first, last, lo, hi)
		}
		if first < 1024 || last > 65535 {
			return fmt.Errorf("ports %d-%d are not all unprivileged ports", first, last)
		}
		return nil
	}
	seen := map[string]bool{}
	for _, a := range reserveLoopbackPorts(t, 40) {
		if seen[a] {
			t.Fatalf("%s reserved twice", a)
		}
		seen[a] = true
		_, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		if err := outside(p, p); err != nil {
			t.Fatal(err)
		}
		if _, ok := claimPort(p); ok {
			t.Fatalf("port %d claimed again while reserved", p)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("a reserved port cannot be bound: %v", err)
		}
		ln.Close()
	}
	for range 10 {
		base := freePortRange(t, failoverExamplePorts)
		if err := outside(base, base+failoverExamplePorts-1); err != nil {
			t.Fatal(err)
		}
		if _, ok := claimPort(base + failoverExamplePorts - 1); ok {
			t.Fatalf("port %d of a reserved range claimed again", base+failoverExamplePorts-1)
		}
	}
}
