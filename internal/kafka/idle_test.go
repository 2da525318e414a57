package kafka

import (
	"net"
	"testing"
)

// With no client connected the cluster refresh parks (no NameServer
// request every second); a connection wakes it at once, and it parks again
// when the last client leaves.
func TestClusterRefreshParksWithoutClients(t *testing.T) {
	f := &fakeCluster{}
	n := startClusterNode(t, f, "broker-a", 0, 1)
	calls := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.calls
	}
	waitUntil(t, "the refresh to park with no client", n.srv.refreshParked.Load)
	before := calls()
	c, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a connection to wake the refresh and fetch the view", func() bool {
		return !n.srv.refreshParked.Load() && calls() > before
	})
	c.Close()
	waitUntil(t, "the refresh to park again", n.srv.refreshParked.Load)
}
