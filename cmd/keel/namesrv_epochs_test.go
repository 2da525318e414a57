package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
)

// TestNamesrvKeepsMasterEpochs: keel namesrv --data-dir keeps the highest
// master epoch of each group, so that after a SIGKILL and a restart it
// still refuses a master registration of an older epoch (a replaced
// master that does not know yet); without --data-dir it does not.
func TestNamesrvKeepsMasterEpochs(t *testing.T) {
	addr := reserveLoopbackPorts(t, 1)[0]
	dir := t.TempDir()
	reg := namesrv.Registration{Cluster: "C", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:1", Topics: map[string]namesrv.TopicConfig{}}
	registerAt := func(epoch uint32) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var cl *remoting.Client
		waitFor(t, "the NameServer listening", 20*time.Second, func() bool {
			var err error
			cl, err = remoting.Dial(ctx, addr, remoting.ClientConfig{})
			return err == nil
		})
		defer cl.Close()
		r := reg
		r.MasterEpoch = epoch
		return namesrv.RegisterBroker(ctx, cl, r)
	}
	for _, durable := range []bool{true, false} {
		args := []string{"namesrv", "--namesrv-listen", addr}
		if durable {
			args = append(args, "--data-dir", dir)
		}
		p := startKeelProc(t, args...)
		if err := registerAt(3); err != nil {
			t.Fatalf("durable=%v: master at epoch 3: %v", durable, err)
		}
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		p = startKeelProc(t, args...)
		err := registerAt(2)
		switch {
		case durable && (err == nil || !strings.Contains(err.Error(), "a master at epoch 3 is registered")):
			t.Fatalf("restarted with --data-dir: a master at epoch 2: %v; log:\n%s", err, p.logs.String())
		case !durable && err != nil:
			t.Fatalf("restarted without --data-dir: a master at epoch 2: %v", err)
		}
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}
