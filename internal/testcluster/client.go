package testcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// Limits of the helpers.
const (
	invokeTimeout = 5 * time.Second  // one Invoke, dial included
	routeTimeout  = 10 * time.Second // WaitRoute
	listenTimeout = 5 * time.Second  // re-listening on a just-closed port
	pollInterval  = 20 * time.Millisecond
)

var seq atomic.Int64

// Uniq returns prefix made unique within the test process (and across
// concurrent test processes): topic, group and instance names.
func Uniq(prefix string) string { return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), seq.Add(1)) }

// WaitFor polls cond until it holds, failing tb after d.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(pollInterval)
	}
}

// Invoke sends one request to addr with a throw-away remoting client (TLS
// when tc != nil).
func Invoke(addr string, tc *tls.Config, req *remoting.Command) (*remoting.Command, error) {
	ctx, cancel := context.WithTimeout(context.Background(), invokeTimeout)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{TLS: tc})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Invoke(ctx, req)
}

// WaitRoute waits until the NameServer serves a route for topic.
func (c *Cluster) WaitRoute(topic string) {
	c.tb.Helper()
	WaitFor(c.tb, routeTimeout, "route of "+topic, func() bool {
		req := remoting.NewRequest(remoting.ReqGetRouteInfoByTopic, map[string]string{"topic": topic}, nil)
		resp, err := Invoke(c.nsAddr, nil, req)
		return err == nil && resp.Code == 0
	})
}

// CreateTopic creates a read-write topic with queues queues on the broker
// (UPDATE_AND_CREATE_TOPIC, as the admin tool does) and waits for its
// route.
func (c *Cluster) CreateTopic(topic string, queues int) {
	c.tb.Helper()
	req := remoting.NewRequest(remoting.ReqUpdateAndCreateTopic, map[string]string{
		"topic": topic, "readQueueNums": fmt.Sprint(queues), "writeQueueNums": fmt.Sprint(queues), "perm": "6"}, nil)
	resp, err := Invoke(c.brAddr, nil, req)
	if err != nil {
		c.tb.Fatalf("create topic %s: %v", topic, err)
	}
	if resp.Code != 0 {
		c.tb.Fatalf("create topic %s: %d %s", topic, resp.Code, resp.Remark)
	}
	c.WaitRoute(topic)
}

// listen listens on addr, retrying for a while: the port of a just-closed
// listener may linger briefly.
func listen(tb testing.TB, addr string) net.Listener {
	tb.Helper()
	deadline := time.Now().Add(listenTimeout)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testcluster: listen %s: %v", addr, err)
		}
		time.Sleep(pollInterval)
	}
}
