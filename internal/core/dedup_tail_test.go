package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestDedupWaitsForARestartedMastersTail: a restarted synchronous master
// shows again only what it had shown, so its key index lacks the
// unreplicated tail; a de-duplicated send is refused as busy (retried by
// the client) until the replicas confirm the tail, instead of being
// checked against an index that cannot know a first copy stored there.
func TestDedupWaitsForARestartedMastersTail(t *testing.T) {
	fs := vfs.NewMem()
	scfg := store.DefaultConfig("/data")
	scfg.FS = fs
	scfg.CommitLogSegmentBytes = 16 << 20
	scfg.ConsumeQueueSegmentEntries = 1000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 100, 400
	scfg.FlushDiskType = store.SyncFlush
	scfg.ExternalReplication = true
	scfg.ReplicationTimeout = 50 * time.Millisecond

	st, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &message.Message{Topic: "T", Body: []byte("first copy")}
	done := make(chan store.PutResult, 1)
	if r, pending := st.PutMessagesDeferred(context.Background(), []*message.Message{m}, func(r store.PutResult) { done <- r }); !pending {
		t.Fatalf("put not pending: %v", r)
	}
	if r := <-done; r.Status == store.PutOK {
		t.Fatalf("an unreplicated put was acknowledged: %v", r)
	}
	written := st.Offset(store.Written)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, err = store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := New(Config{DataDir: "/data", FS: fs, AutoCreateTopicEnable: true, AutoCreateSubscriptionGroup: true}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.SetDeduplicator(&recordingDedup{seen: map[string]*message.Message{}})
	retry := &message.Message{Topic: "T", Body: []byte("first copy")}
	if _, err := b.CheckDuplicate(context.Background(), retry, "K", true); !errors.Is(err, ErrBusy) {
		t.Fatalf("single send while the tail is hidden: %v, want busy", err)
	}
	if _, err := b.CheckBatchDuplicates(context.Background(), "T", []*message.Message{withUniq(retry, "K")}); !errors.Is(err, ErrBusy) {
		t.Fatalf("batch while the tail is hidden: %v, want busy", err)
	}

	st.AdvanceReplicated(written)
	deadline := time.Now().Add(10 * time.Second)
	for st.VisibleOffset() < written {
		if time.Now().After(deadline) {
			t.Fatalf("the tail was not shown after the replicas confirmed it (visible %d, written %d)", st.VisibleOffset(), written)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if dd, err := b.CheckDuplicate(context.Background(), retry, "K", true); err != nil || dd == nil {
		t.Fatalf("single send once the tail is shown: %+v %v", dd, err)
	} else {
		dd.Abort()
	}
}

func withUniq(m *message.Message, key string) *message.Message {
	c := *m
	c.Properties = message.SetProperty(c.Properties, message.PropUniqKey, key)
	return &c
}
