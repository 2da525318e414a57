package admin

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// TestReadBrokers: a group's master is read; a group without a master
// registered, and one whose registered master refuses connections, are
// read from their slave with the lowest id, told once each while it
// lasts, and again after the master came back and went again.
func TestReadBrokers(t *testing.T) {
	live := startFake(t, remoting.ResSuccess, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // refuses connections from now on
	table := map[string]string{
		"a": fmt.Sprintf(`{"0":%q,"1":"10.0.0.2:1","2":"10.0.0.3:1"}`, dead),
		"b": `{"2":"10.0.1.3:1","1":"10.0.1.2:1"}`,
		"c": fmt.Sprintf(`{"0":%q,"1":"10.0.2.2:1"}`, live.addr),
	}
	var mu sync.Mutex // guards table
	set := func(name, addrs string) { mu.Lock(); table[name] = addrs; mu.Unlock() }
	ns := startNamesrvFake(t, func() string {
		mu.Lock()
		defer mu.Unlock()
		var parts []string
		for name, addrs := range table {
			parts = append(parts, fmt.Sprintf(`%q:{"cluster":"x","brokerName":%q,"brokerAddrs":%s}`, name, name, addrs))
		}
		return `{"brokerAddrTable":{` + strings.Join(parts, ",") + `}}`
	})
	var told []string
	c := New(Config{NamesrvAddrs: []string{ns}, Timeout: 2 * time.Second, OnSlaveRead: func(r SlaveRead) { told = append(told, r.String()) }})
	defer c.Close()
	ctx := context.Background()
	read := func() string {
		t.Helper()
		bs, err := c.ReadBrokers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, b := range bs {
			out = append(out, fmt.Sprintf("%s/%d", b.Name, b.ID))
		}
		return strings.Join(out, " ")
	}
	if got := read(); got != "a/1 b/1 c/0" {
		t.Fatalf("read brokers %s", got)
	}
	if got := read(); got != "a/1 b/1 c/0" || len(told) != 2 ||
		!strings.HasPrefix(told[0], "broker group a has a master registered at "+dead+" that does not answer (") ||
		told[1] != "broker group b has no master registered with the NameServers: reading from its slave 1 at 10.0.1.2:1 (what the master confirmed to it)" {
		t.Fatalf("read brokers %s, told %q", got, told)
	}
	if rs := c.SlaveReads(); len(rs) != 2 || rs[0].Slave.Name != "a" || rs[1].Slave.Addr != "10.0.1.2:1" {
		t.Fatalf("slave reads %+v", rs)
	}
	set("b", fmt.Sprintf(`{"0":%q,"1":"10.0.1.2:1"}`, live.addr)) // b's master is back
	if got := read(); got != "a/1 b/0 c/0" || len(c.SlaveReads()) != 1 || len(told) != 2 {
		t.Fatalf("with b's master back: %s, slave reads %+v, told %q", got, c.SlaveReads(), told)
	}
	set("b", `{"1":"10.0.1.2:1"}`) // and gone again: told again
	if got := read(); got != "a/1 b/1 c/0" || len(told) != 3 {
		t.Fatalf("with b's master gone again: %s, told %q", got, told)
	}
}

// startNamesrvFake answers GET_BROKER_CLUSTER_INFO with body().
func startNamesrvFake(t *testing.T, body func() string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := remoting.NewServer(remoting.ServerConfig{}, remoting.HandlerFunc(
		func(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
			resp := req.NewResponse(remoting.ResSuccess, "")
			resp.Body = []byte(body())
			return resp
		}))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return ln.Addr().String()
}
