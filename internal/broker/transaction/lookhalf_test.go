package transaction

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestLookHalfWaitsForConfirmed: END may arrive for a half message that is
// written but not yet confirmed (here: flushed, not yet replicated);
// lookHalf waits on the store's Confirmed watermark and reads it once it
// passes, instead of failing.
func TestLookHalfWaitsForConfirmed(t *testing.T) {
	cfg := store.DefaultConfig(t.TempDir())
	cfg.FS = vfs.OS{}
	cfg.FlushDiskType = store.SyncFlush
	cfg.ExternalReplication = true
	cfg.CommitLogSegmentBytes = 4 << 20
	cfg.MaxMessageBytes = 64 << 10
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 1024, 100000
	cfg.RetentionCheckInterval = time.Hour
	st, err := store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := &message.Message{Topic: "RMQ_SYS_TRANS_HALF_TOPIC", Body: []byte("half"),
		BornHost: netip.MustParseAddrPort("10.0.0.1:1"), StoreHost: netip.MustParseAddrPort("10.0.0.2:2")}
	if _, pending := st.PutMessagesDeferred(context.Background(), []*message.Message{m}, func(store.PutResult) {}); !pending {
		t.Fatal("put not pending")
	}
	end := m.PhysOffset + int64(m.StoredSize()) + 4
	if err := st.WaitFor(context.Background(), store.Flushed, end, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := st.LookMessageByOffset(m.PhysOffset); err == nil {
		t.Fatal("readable by offset before it is confirmed")
	}
	e := &Engine{st: st, cfg: Config{VisibleWait: 10 * time.Second}}
	// Replication reports the record after lookHalf has found it missing:
	// an implementation that does not wait fails below.
	time.AfterFunc(20*time.Millisecond, func() { st.AdvanceReplicated(end) })
	rec, err := e.lookHalf(context.Background(), m.PhysOffset)
	if err != nil || string(message.View(rec).Body()) != "half" {
		t.Fatalf("lookHalf: %v", err)
	}
}
