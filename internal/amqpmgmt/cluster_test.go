package amqpmgmt

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"

	"github.com/keelmq/keel/internal/amqpinfo"
)

// TestClusterQueues: with Config.Cluster, the queue list holds the other
// groups' queues with the node that stores each (a name on two groups
// twice, by node), their own arguments; a queue of another group is found
// by name; the overview and vhosts count them; a group that did not
// answer is in unreachable_nodes and /api/nodes with running false and
// why, and the user is passed on to Cluster.
func TestClusterQueues(t *testing.T) {
	var users []string
	cluster := func(_ context.Context, user string) []Group {
		users = append(users, user)
		return []Group{
			{Node: "keel@broker-b", Queues: []Queue{
				{Queue: amqpinfo.Queue{Vhost: "/", Name: "alpha", Ready: 2}},
				{Queue: amqpinfo.Queue{Vhost: "/", Name: "gamma", Ready: 5, Unacked: 1}, Arguments: map[string]any{"x-message-ttl": float64(1000)}},
			}},
			{Node: "keel@broker-c", Err: "dial 127.0.0.1:1: connection refused"},
		}
	}
	h := Handler(Config{Source: testSource(), Node: "keel@test", Version: "v0", Cluster: cluster,
		Login: func(u, p string, _ net.Addr) bool { return u == "guest" && p == "guest" }})
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)

	var qs []map[string]any
	get(t, s, "/api/queues/%2F", &qs)
	var got []string
	for _, q := range qs {
		got = append(got, q["name"].(string)+"@"+q["node"].(string))
	}
	want := []string{"alpha@keel@broker-b", "alpha@keel@test", "beta@keel@test", "gamma@keel@broker-b"}
	if len(got) != len(want) {
		t.Fatalf("queues %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("queues %v, want %v", got, want)
		}
	}
	var q map[string]any
	get(t, s, "/api/queues/%2F/gamma", &q)
	if q["node"] != "keel@broker-b" || q["messages"] != float64(6) || q["arguments"].(map[string]any)["x-message-ttl"] != float64(1000) {
		t.Fatalf("gamma: %v", q)
	}
	var o map[string]any
	get(t, s, "/api/overview", &o)
	if n := o["object_totals"].(map[string]any)["queues"]; n != float64(5) {
		t.Errorf("overview counts %v queues, want 5", n)
	}
	if m := o["queue_totals"].(map[string]any)["messages"]; m != float64(4+7+1+2+6) {
		t.Errorf("overview counts %v messages, want 20", m)
	}
	un := o["unreachable_nodes"].([]any)
	if len(un) != 1 || un[0].(map[string]any)["name"] != "keel@broker-c" || un[0].(map[string]any)["reason"] == "" {
		t.Errorf("unreachable nodes %v", un)
	}
	var ns []map[string]any
	get(t, s, "/api/nodes", &ns)
	if len(ns) != 3 || ns[0]["running"] != true || ns[1]["name"] != "keel@broker-b" || ns[1]["running"] != true ||
		ns[2]["name"] != "keel@broker-c" || ns[2]["running"] != false || ns[2]["reason"] != "dial 127.0.0.1:1: connection refused" {
		t.Errorf("nodes %v", ns)
	}
	var vh map[string]any
	get(t, s, "/api/vhosts/%2F", &vh)
	if vh["messages"] != float64(4+7+2+6) {
		t.Errorf("vhost / counts %v messages, want 19", vh["messages"])
	}
	for _, u := range users {
		if u != "guest" {
			t.Fatalf("Cluster asked for user %q", u)
		}
	}
}
