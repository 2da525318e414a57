package core

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
)

// fakeClock is a settable clock for the registries and the lock table.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// conn stands for a front door's connection handle.
type conn struct{ id int }

// TestParseSubscription: TAG expressions compile to tag sets with codes
// recomputed; SQL92 is unsupported and an expression of separators only
// is invalid, each as its own kind.
func TestParseSubscription(t *testing.T) {
	for _, expr := range []string{"", "*", "  *  "} {
		s, err := ParseSubscription("T", expr, "", 1)
		if err != nil || !s.MatchesAll() || s.Filter() != nil || !s.MatchCode(12345) {
			t.Fatalf("%q: %+v %v", expr, s, err)
		}
	}
	s, err := ParseSubscription("T", "TagA || TagB||", "tag", 7)
	if err != nil || s.MatchesAll() || s.Tags() != 2 || s.Version != 7 || s.Expression != "TagA || TagB||" || s.Type != FilterTag {
		t.Fatalf("%+v %v", s, err)
	}
	if !s.MatchCode(message.TagsCode("TagA")) || s.MatchCode(message.TagsCode("TagC")) {
		t.Fatal("tag codes not recomputed from the tags")
	}
	f := s.Filter()
	if f == nil || !f.MatchTagsCode(message.TagsCode("TagB")) {
		t.Fatal("no store filter for a tag expression")
	}
	if _, err := ParseSubscription("T", "a > 1", "SQL92", 1); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("SQL92: %v", err)
	}
	if err := CheckFilterType("sql92"); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("CheckFilterType: %v", err)
	}
	if _, err := ParseSubscription("T", "|| ||", "TAG", 1); !errors.Is(err, ErrInvalidFilter) {
		t.Fatalf("separators only: %v", err)
	}
}

// TestConsumersMembership: members join, rejoin on another connection,
// leave by connection, by unregistering and by expiry, and each change
// names the connections of the members left to tell (only when the group
// asked for it).
func TestConsumersMembership(t *testing.T) {
	clk := newFakeClock()
	m := newConsumers(clk.Now, discardLog())
	sub, _ := ParseSubscription("T", "*", "", 1)
	subs := map[string]*Subscription{"T": sub}
	mode := ConsumerGroupMode{MessageModel: MessageModelClustering}
	a, b, b2 := &conn{1}, &conn{2}, &conn{3}
	if got := m.Register("g", mode, Client{ID: "A", Conn: a}, subs, true); len(got) != 1 || got[0] != a {
		t.Fatalf("A joining tells %v", got)
	}
	if got := m.Register("g", mode, Client{ID: "B", Conn: b}, subs, true); len(got) != 2 {
		t.Fatalf("B joining tells %v", got)
	}
	if got := m.Register("g", mode, Client{ID: "B", Conn: b}, subs, true); got != nil {
		t.Fatalf("a known member's heartbeat tells %v", got)
	}
	if got := m.Register("g", mode, Client{ID: "B", Conn: b2}, subs, true); len(got) != 2 {
		t.Fatalf("B reconnecting tells %v", got)
	}
	if got := m.Register("quiet", mode, Client{ID: "Q", Conn: a}, subs, false); got != nil {
		t.Fatalf("a group without notification tells %v", got)
	}
	if ids := m.ClientIDs("g"); !slices.Equal(ids, []string{"A", "B"}) {
		t.Fatalf("ids %v", ids)
	}
	model, s, ok := m.Lookup("g", "T")
	if !ok || model != MessageModelClustering || s != sub {
		t.Fatalf("lookup %q %v %v", model, s, ok)
	}
	if _, s, ok := m.Lookup("g", "Other"); !ok || s != nil {
		t.Fatalf("lookup of an unsubscribed topic: %v %v", s, ok)
	}
	if groups, members := m.Counts(); groups != 2 || members != 3 {
		t.Fatalf("counts %d %d", groups, members)
	}
	// B's old connection closing drops nobody: B came back on b2.
	if ch := m.RemoveConn(b); len(ch) != 0 || len(m.ClientIDs("g")) != 2 {
		t.Fatalf("stale connection removed %v", ch)
	}
	// A's connection holds A in g and Q in quiet; only g is told, and tells B.
	ch := m.RemoveConn(a)
	if len(ch) != 1 || ch[0].Group != "g" || len(ch[0].Conns) != 1 || ch[0].Conns[0] != b2 {
		t.Fatalf("changes %+v", ch)
	}
	if _, _, ok := m.Lookup("quiet", "T"); ok {
		t.Fatal("a group whose last member left is still online")
	}
	m.Register("g", mode, Client{ID: "A", Conn: a}, subs, true)
	if ch := m.Unregister("g", "A"); len(ch) != 1 || len(m.ClientIDs("g")) != 1 {
		t.Fatalf("unregister: %+v", ch)
	}
	clk.Advance(100 * time.Second)
	m.Register("g", mode, Client{ID: "C", Conn: &conn{4}, Language: "GO", Version: 9}, subs, true)
	clk.Advance(30 * time.Second)
	m.Expire(120 * time.Second)
	v, ok := m.Group("g")
	if !ok || len(v.Members) != 1 || v.Members[0].ID != "C" || v.Members[0].Language != "GO" || v.Members[0].Version != 9 ||
		v.Subscriptions["T"] != sub || v.MessageModel != MessageModelClustering {
		t.Fatalf("after expiry %+v", v)
	}
	if online, model := m.Members("g"); online != 1 || model != MessageModelClustering {
		t.Fatalf("members %d %q", online, model)
	}
	if topics := m.SubscribedTopics("g"); !slices.Equal(topics, []string{"T"}) {
		t.Fatalf("topics %v", topics)
	}
}

// TestProducersRegistry: the most recently seen connection of a group
// answers check-backs; entries leave by connection, by unregistering and
// by expiry.
func TestProducersRegistry(t *testing.T) {
	clk := newFakeClock()
	m := newProducers(clk.Now)
	a, b := &conn{1}, &conn{2}
	m.Register("pg", Client{ID: "A", Conn: a})
	clk.Advance(time.Second)
	m.Register("pg", Client{ID: "B", Conn: b})
	if got := m.AnyConn("pg"); got != b || m.Count() != 2 {
		t.Fatalf("any %v count %d", got, m.Count())
	}
	m.RemoveConn(b)
	if got := m.AnyConn("pg"); got != a {
		t.Fatalf("after B's close: %v", got)
	}
	m.Unregister("pg", "A")
	if got := m.AnyConn("pg"); got != nil || m.Count() != 0 {
		t.Fatalf("after unregister: %v", got)
	}
	m.Register("pg", Client{ID: "A", Conn: a})
	clk.Advance(121 * time.Second)
	m.Expire(120 * time.Second)
	if m.AnyConn("pg") != nil {
		t.Fatal("a silent producer did not expire")
	}
}

// TestQueueLocks: a queue goes to one client of a group at a time, is
// renewed by its holder, released only by it, free again after the
// expiry, and expired entries are swept by later locks.
func TestQueueLocks(t *testing.T) {
	clk := newFakeClock()
	l := newQueueLocks(60*time.Second, clk.Now)
	q := func(ids ...int32) []LockedQueue {
		var out []LockedQueue
		for _, id := range ids {
			out = append(out, LockedQueue{Broker: "b", Topic: "T", QueueID: id})
		}
		return out
	}
	if got := l.Lock("g", "A", q(0, 1)); len(got) != 2 {
		t.Fatalf("A %v", got)
	}
	if got := l.Lock("g", "B", q(1, 2)); !slices.Equal(got, q(2)) {
		t.Fatalf("B %v", got)
	}
	if got := l.Lock("g2", "B", q(1)); len(got) != 1 {
		t.Fatalf("another group %v", got)
	}
	if got := l.Lock("g", "B", []LockedQueue{{Broker: "other", Topic: "T", QueueID: 1}}); len(got) != 1 {
		t.Fatalf("a queue of another broker name is another queue: %v", got)
	}
	l.Unlock("g", "B", q(0)) // not B's
	if h, ok := l.Holder("g", q(0)[0]); !ok || h != "A" {
		t.Fatalf("holder %q %v", h, ok)
	}
	clk.Advance(59 * time.Second)
	l.Lock("g", "A", q(0)) // renewed
	clk.Advance(2 * time.Second)
	if got := l.Lock("g", "B", q(0, 1)); !slices.Equal(got, q(1)) {
		t.Fatalf("B after A's lock on 1 expired: %v", got)
	}
	l.Unlock("g", "A", q(0))
	if _, ok := l.Holder("g", q(0)[0]); ok {
		t.Fatal("released queue still held")
	}
	// Everything expires; a lock call sweeps the stale entries.
	clk.Advance(61 * time.Second)
	l.Lock("g3", "Z", q(9))
	if n := l.held(); n != 1 {
		t.Fatalf("%d entries after the sweep, want 1", n)
	}
}
