package broker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestSendGateRefusesBeforeStoring: a send the SendGate refuses (a slave;
// a SYNC_MASTER short of in-sync replicas) is answered with the gate's
// status and stores nothing.
func TestSendGateRefusesBeforeStoring(t *testing.T) {
	for _, tc := range []struct {
		res    store.PutResult
		code   int16
		remark string
	}{
		{store.PutResult{Status: store.PutInSyncReplicasNotEnough, Err: errors.New("1 of 2 copies in sync")}, remoting.ResSystemError, "IN_SYNC_REPLICAS_NOT_ENOUGH: 1 of 2"},
		{store.PutResult{Status: store.PutServiceNotAvailable, Err: errors.New("this broker is a slave")}, remoting.ResServiceNotAvailable, "slave"},
	} {
		e := startEnvFlush(t, store.SyncFlush, func(c *Config) { c.SendGate = func() store.PutResult { return tc.res } })
		cl := e.dial()
		resp := cl.sendV1("T1", 0, "", []byte("x"))
		wantCode(t, resp, tc.code)
		if !strings.Contains(resp.Remark, tc.remark) {
			t.Errorf("remark %q, want %q", resp.Remark, tc.remark)
		}
		if w := e.st.Offset(store.Written); w != 0 {
			t.Fatalf("refused send stored %d bytes", w)
		}
		e.shutdown()
	}
}

// TestSendUnreplicatedIsFlushSlaveTimeout: on a SYNC_MASTER's store
// (ExternalReplication) a send no replica confirms is answered
// FLUSH_SLAVE_TIMEOUT, never SEND_OK, under both flush modes.
func TestSendUnreplicatedIsFlushSlaveTimeout(t *testing.T) {
	flushTypes(t, func(t *testing.T, flush store.FlushDiskType) {
		e := &env{t: t, dir: t.TempDir(), fs: vfs.OS{}, flush: flush, storeMutate: func(c *store.Config) {
			c.ExternalReplication = true
			c.ReplicationTimeout = 100 * time.Millisecond
		}}
		e.cfg = DefaultConfig()
		e.cfg.DataDir = e.dir
		e.start()
		t.Cleanup(e.shutdown)
		resp := e.dial().sendV1("T1", 0, "", []byte("x"))
		wantCode(t, resp, remoting.ResFlushSlaveTimeout)
		if resp.ExtFields["msgId"] == "" {
			t.Errorf("FLUSH_SLAVE_TIMEOUT without msgId: %v", resp.ExtFields)
		}
	})
}
