package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/remoting"
)

// sendOnly borrows the body of, and runs inline, ReqSendMessage only.
type sendOnly struct{}

func (sendOnly) Handle(context.Context, *remoting.Conn, *remoting.Command) *remoting.Command {
	return nil
}
func (sendOnly) BorrowsBody(code int16) bool           { return code == remoting.ReqSendMessage }
func (sendOnly) RunsInline(req *remoting.Command) bool { return req.Code == remoting.ReqSendMessage }

// TestLateHandlerForwardsOptionalInterfaces: the broker server's handler,
// set after the server is made, keeps what the broker's handler offers to
// remoting (frame reuse, inline sends); a handler without them (the ACL
// wrapper) gets neither.
func TestLateHandlerForwardsOptionalInterfaces(t *testing.T) {
	var h remoting.Handler = sendOnly{}
	late := lateHandler{&h}
	send, pull := remoting.NewRequest(remoting.ReqSendMessage, nil, nil), remoting.NewRequest(remoting.ReqPullMessage, nil, nil)
	if !remoting.BorrowsBody(late, send.Code) || remoting.BorrowsBody(late, pull.Code) {
		t.Fatal("BorrowsBody not forwarded")
	}
	if !remoting.RunsInline(late, send) || remoting.RunsInline(late, pull) {
		t.Fatal("RunsInline not forwarded")
	}
	h = remoting.HandlerFunc(func(context.Context, *remoting.Conn, *remoting.Command) *remoting.Command { return nil })
	if remoting.BorrowsBody(late, send.Code) || remoting.RunsInline(late, send) {
		t.Fatal("a plain handler borrows or runs inline through lateHandler")
	}
}

// TestOneCoreForEveryFrontDoor: the broker's starters build the core once
// on the store, the RocketMQ front door serves that core, and the Kafka
// front door starts on it; the core stops after the front door and
// flushes the committed offsets.
func TestOneCoreForEveryFrontDoor(t *testing.T) {
	cfg := config.Default()
	cfg.StorePathRootDir = t.TempDir()
	p := &parts{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	starters := append([]starter{p.storeStarter()}, p.brokerStarters("127.0.0.1:0")...)
	starters = append(starters, p.kafkaStarter("127.0.0.1:0"))
	var svcs []service
	defer func() {
		var wg sync.WaitGroup
		if err := stopServices(p.log, svcs, &wg); err != nil {
			t.Error(err)
		}
	}()
	for _, start := range starters {
		s, err := start()
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, s)
	}
	if p.core == nil || p.broker.Core() != p.core {
		t.Fatalf("the broker serves core %p, the process built %p", p.broker.Core(), p.core)
	}
	if _, err := p.core.EnsureGroup("g"); err != nil {
		t.Fatal(err)
	}
	if err := p.core.CommitOffset("g", "TBW102", 0, 0); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range svcs {
		names = append(names, s.name)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "broker server core broker kafka") {
		t.Fatalf("services %q: the core must start after the listener and before the front doors", got)
	}
	var wg sync.WaitGroup
	err := stopServices(p.log, svcs, &wg)
	svcs = nil
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(cfg.StorePathRootDir, "config", "consumerOffset.json"))
	if err != nil || !strings.Contains(string(data), "TBW102@g") {
		t.Fatalf("offsets not flushed when the core stopped: %q %v", data, err)
	}
}
