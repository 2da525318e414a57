package core

import (
	"context"
	"errors"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// recordingDedup knows the keys in seen and records every release.
type recordingDedup struct {
	seen     map[string]*message.Message
	err      error
	released []*message.Message // the stored message of each release (nil: not stored)
	statuses []store.PutStatus
}

func (d *recordingDedup) Check(ctx context.Context, topic, key string) (*message.Message, func(*message.Message, store.PutResult), error) {
	if d.err != nil {
		return nil, nil, d.err
	}
	if m := d.seen[topic+"#"+key]; m != nil {
		return m, nil, nil
	}
	return nil, func(m *message.Message, res store.PutResult) {
		if m != nil {
			c := *m // lent: copied, not kept
			m = &c
		}
		d.released = append(d.released, m)
		d.statuses = append(d.statuses, res.Status)
	}, nil
}

// TestCheckDuplicate: a single message is checked only with a
// Deduplicator and a client key; a duplicate reports the original and
// stores nothing; a new message is released exactly once, with a copy as
// reported (the response's queue, no body) after the put, or as not stored
// after Abort.
func TestCheckDuplicate(t *testing.T) {
	b := newTestBroker(t, nil)
	m := &message.Message{Topic: "T", QueueID: 1, Body: []byte("body")}
	if dd, err := b.CheckDuplicate(context.Background(), m, "K", true); dd != nil || err != nil {
		t.Fatalf("without a Deduplicator: %v %v", dd, err)
	}
	orig := &message.Message{Topic: "T", QueueID: 2, QueueOffset: 7, PhysOffset: 99}
	d := &recordingDedup{seen: map[string]*message.Message{"T#OLD": orig}}
	b.SetDeduplicator(d)
	if dd, err := b.CheckDuplicate(context.Background(), m, "K", false); dd != nil || err != nil {
		t.Fatalf("a broker-made key was checked: %v %v", dd, err)
	}
	dd, err := b.CheckDuplicate(context.Background(), m, "OLD", true)
	if err != nil || !dd.Duplicate() || dd.Result[0] != orig {
		t.Fatalf("duplicate: %+v %v", dd, err)
	}
	dd, err = b.CheckDuplicate(context.Background(), m, "NEW", true)
	if err != nil || dd.Duplicate() || len(dd.Store) != 1 || dd.Store[0] != m {
		t.Fatalf("new key: %+v %v", dd, err)
	}
	m.QueueID, m.QueueOffset, m.PhysOffset = 3, 5, 1234 // as an engine or the put set them
	dd.Finish(store.PutResult{Status: store.PutOK}, 1)
	dd.Finish(store.PutResult{Status: store.PutOK}, 1) // a second Finish releases nothing
	dd.Abort()                                         // nor an Abort after it
	if len(d.released) != 1 {
		t.Fatalf("released %d times", len(d.released))
	}
	if r := d.released[0]; r == m || r.QueueID != 1 || r.QueueOffset != 5 || r.PhysOffset != 1234 || r.Body != nil {
		t.Fatalf("reported %+v", r)
	}
	dd, _ = b.CheckDuplicate(context.Background(), m, "OTHER", true)
	dd.Abort()
	if len(d.released) != 2 || d.released[1] != nil || d.statuses[1] == store.PutOK {
		t.Fatalf("abort released %v %v", d.released, d.statuses)
	}
	d.err = errors.New("index down")
	if _, err := b.CheckDuplicate(context.Background(), m, "K2", true); !errors.Is(err, ErrInternal) {
		t.Fatalf("failed check: %v", err)
	}
}

// staticDedup finds nothing and releases through one function.
type staticDedup struct {
	release func(*message.Message, store.PutResult)
}

func (d staticDedup) Check(context.Context, string, string) (*message.Message, func(*message.Message, store.PutResult), error) {
	return nil, d.release, nil
}

// A single message's check and its release allocate its Dedup only.
func TestCheckDuplicateOneAllocation(t *testing.T) {
	b := newTestBroker(t, nil)
	b.SetDeduplicator(staticDedup{func(*message.Message, store.PutResult) {}})
	m := &message.Message{Topic: "T", QueueID: 1, Body: []byte("body")}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		dd, err := b.CheckDuplicate(ctx, m, "K", true)
		if err != nil || len(dd.Store) != 1 || dd.Store[0] != m || len(dd.Result) != 1 || dd.Result[0] != m {
			t.Fatalf("%+v %v", dd, err)
		}
		dd.Finish(store.PutResult{Status: store.PutOK}, 1)
	}); n != 1 {
		t.Errorf("CheckDuplicate and Finish of a new key: %v allocations, want 1", n)
	}
}
