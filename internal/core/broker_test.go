package core

import (
	"errors"
	"testing"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// newTestBroker opens a store and a core on a MemFS; mutate adjusts the
// core's config.
func newTestBroker(t *testing.T, mutate func(*Config)) *Broker {
	t.Helper()
	fs := vfs.NewMem()
	scfg := store.DefaultConfig("/data")
	scfg.FS = fs
	scfg.CommitLogSegmentBytes = 16 << 20
	scfg.ConsumeQueueSegmentEntries = 1000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 100, 400
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := Config{DataDir: "/data", FS: fs, AutoCreateTopicEnable: true, AutoCreateSubscriptionGroup: true}
	if mutate != nil {
		mutate(&cfg)
	}
	b, err := New(cfg, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDomainErrorsAreTyped: the core's refusals carry their kind (no
// protocol code) and a message for the client.
func TestDomainErrorsAreTyped(t *testing.T) {
	b := newTestBroker(t, func(c *Config) {
		c.AutoCreateTopicEnable, c.AutoCreateSubscriptionGroup = false, false
		c.MaxTopics = 2 // SELF_TEST_TOPIC + 1
	})
	cases := []struct {
		what string
		err  error
		kind error
	}{
		{"blank topic", ValidateTopic(""), ErrInvalidArgument},
		{"unknown group", second(b.EnsureGroup("g")), ErrGroupNotFound},
		{"unknown topic", second(b.AutoCreateTopic("T", DefaultTopic, 4)), ErrTopicNotFound},
		{"system topic update", b.UpdateTopic(NewTopicConfig(DefaultTopic, 4, PermRW)), ErrInvalidArgument},
		{"system topic delete", b.DeleteTopic(SelfTestTopic), ErrInvalidArgument},
		{"offset of an unknown topic", b.CommitOffset("g", "T", 0, 1), ErrTopicNotFound},
		{"bad group", b.UpdateGroup(GroupConfig{}), ErrInvalidArgument},
	}
	if _, err := b.EnsureTopic("A", 1, PermRW); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct {
		what string
		err  error
		kind error
	}{"topic limit", second(b.EnsureTopic("B", 1, PermRW)), ErrLimitReached})
	for _, c := range cases {
		var de *Error
		if !errors.Is(c.err, c.kind) || !errors.As(c.err, &de) || de.Msg == "" {
			t.Errorf("%s: %v, want a %v with a message", c.what, c.err, c.kind)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestOnTopicsChangedCancel: every subscriber hears a topic change until
// it cancels; a cancelled one hears no more, the others still do.
func TestOnTopicsChangedCancel(t *testing.T) {
	b := newTestBroker(t, nil)
	var a, c int
	cancelA := b.OnTopicsChanged(func() { a++ })
	b.OnTopicsChanged(func() { c++ })
	if _, err := b.EnsureTopic("t1", 4, 6); err != nil {
		t.Fatal(err)
	}
	if a == 0 || c == 0 {
		t.Fatalf("after a topic was made: heard %d and %d times, want both", a, c)
	}
	cancelA()
	cancelA() // twice is harmless
	a0, c0 := a, c
	if _, err := b.EnsureTopic("t2", 4, 6); err != nil {
		t.Fatal(err)
	}
	if a != a0 || c == c0 {
		t.Fatalf("after cancel: the cancelled one heard %d more, the other %d more; want 0 and some", a-a0, c-c0)
	}
}
