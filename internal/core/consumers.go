package core

// The registry of online consumers, for every front door: which clients
// are members of which consumer group, over which connection, and what
// each group subscribes to.
//
// A client is named by an opaque identity (Client.ID: RocketMQ's clientId)
// and the front door's handle of the connection it came on (Client.Conn,
// compared for identity only: a member whose Conn changed has reconnected).
// Membership is keyed by client ID within a group. Register replaces the
// group's subscriptions with the ones given (the latest registration wins,
// as in RocketMQ). A member leaves when its connection closes (RemoveConn),
// when it unregisters, or when it was not seen for a timeout (Expire).
// Whenever a group's member set changes, the calls return the connections
// of the members left to tell (when the group asked to be told), so the
// front door can notify them in its protocol; the registry itself sends
// nothing. All of it is memory only: after a restart clients register
// again with their next heartbeat.

import (
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/store"
)

// Client is a connected client as a front door names it to the core.
type Client struct {
	ID string // the client's own identity (opaque)
	// Conn is the front door's handle of the client's connection: it must
	// be comparable, and is compared for identity and handed back for
	// notifications (RocketMQ: *remoting.Conn).
	Conn     any
	Language string // what the client says it is written in ("" = unknown)
	Version  int    // the client's protocol or library version
}

// ConsumerGroupMode is what the members of a consumer group declared
// about how they consume (the latest registration's values).
type ConsumerGroupMode struct {
	ConsumeType      string // e.g. CONSUME_PASSIVELY (pull) or CONSUME_ACTIVELY
	MessageModel     string // MessageModelClustering or MessageModelBroadcasting
	ConsumeFromWhere string // where a member without an offset starts
}

// Message models of consumer groups.
const (
	MessageModelClustering   = "CLUSTERING"   // each message to one member
	MessageModelBroadcasting = "BROADCASTING" // each message to every member
)

// Member is one online member of a consumer group.
type Member struct {
	Client
	LastSeen time.Time // its latest registration
}

// MembershipChange names a group whose member set changed and the
// connections of its remaining members to tell.
type MembershipChange struct {
	Group string
	Conns []any
}

// ConsumerGroupView is a copy of an online group's registration.
type ConsumerGroupView struct {
	ConsumerGroupMode
	Members       []Member                 // sorted by client ID
	Subscriptions map[string]*Subscription // by topic
}

// Consumers is the registry of online consumers. Its methods are safe for
// concurrent use.
type Consumers struct {
	now func() time.Time
	log *slog.Logger

	mu     sync.Mutex
	groups map[string]*consumerGroup
}

type consumerGroup struct {
	mode    ConsumerGroupMode
	subs    map[string]*Subscription
	members map[string]*Member // by client ID
	notify  bool
}

func newConsumers(now func() time.Time, log *slog.Logger) *Consumers {
	return &Consumers{now: now, log: log, groups: make(map[string]*consumerGroup)}
}

// Consumers returns the core's registry of online consumers.
func (b *Broker) Consumers() *Consumers { return b.consumers }

// Register records c as a member of group with the group's mode and
// subscriptions (replacing the group's previous ones). notify says whether
// the group's members want to be told of membership changes; if c joined
// (or came back on another connection) and notify is set, it returns the
// connections of every member to tell, c's included.
func (m *Consumers) Register(group string, mode ConsumerGroupMode, c Client, subs map[string]*Subscription, notify bool) []any {
	m.mu.Lock()
	g := m.groups[group]
	if g == nil {
		g = &consumerGroup{members: make(map[string]*Member)}
		m.groups[group] = g
	}
	g.mode, g.subs, g.notify = mode, subs, notify
	old := g.members[c.ID]
	changed := old == nil || old.Conn != c.Conn
	g.members[c.ID] = &Member{Client: c, LastSeen: m.now()}
	var targets []any
	if changed && notify {
		targets = g.conns()
	}
	m.mu.Unlock()
	if changed {
		m.log.Info("consumer joined", "group", group, "client", c.ID)
	}
	return targets
}

func (g *consumerGroup) conns() []any {
	out := make([]any, 0, len(g.members))
	for _, mb := range g.members {
		out = append(out, mb.Conn)
	}
	return out
}

// removeWhere drops the members for which drop returns true and returns
// the changes to tell.
func (m *Consumers) removeWhere(drop func(group string, mb *Member) bool) []MembershipChange {
	var changes []MembershipChange
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, g := range m.groups {
		n := len(g.members)
		for id, mb := range g.members {
			if drop(name, mb) {
				delete(g.members, id)
				m.log.Info("consumer left", "group", name, "client", id)
			}
		}
		if len(g.members) == n {
			continue
		}
		if len(g.members) == 0 {
			delete(m.groups, name)
			continue
		}
		if g.notify {
			changes = append(changes, MembershipChange{name, g.conns()})
		}
	}
	return changes
}

// RemoveConn drops every member registered over conn (its connection
// closed).
func (m *Consumers) RemoveConn(conn any) []MembershipChange {
	return m.removeWhere(func(_ string, mb *Member) bool { return mb.Conn == conn })
}

// Unregister drops client clientID from group.
func (m *Consumers) Unregister(group, clientID string) []MembershipChange {
	return m.removeWhere(func(g string, mb *Member) bool { return g == group && mb.ID == clientID })
}

// Expire drops every member not seen for timeout.
func (m *Consumers) Expire(timeout time.Duration) []MembershipChange {
	deadline := m.now().Add(-timeout)
	return m.removeWhere(func(_ string, mb *Member) bool { return mb.LastSeen.Before(deadline) })
}

// ClientIDs returns the client IDs of group's members, sorted.
func (m *Consumers) ClientIDs(group string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil {
		return nil
	}
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Lookup returns group's message model and its subscription to topic (nil
// if it has none); ok is false if no member of the group is online.
func (m *Consumers) Lookup(group, topic string) (messageModel string, sub *Subscription, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil {
		return "", nil, false
	}
	return g.mode.MessageModel, g.subs[topic], true
}

// SubscribedTopics returns the topics group's online members subscribe
// to, unsorted.
func (m *Consumers) SubscribedTopics(group string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil {
		return nil
	}
	out := make([]string, 0, len(g.subs))
	for t := range g.subs {
		out = append(out, t)
	}
	return out
}

// GroupNames returns the groups with a member online, unsorted.
func (m *Consumers) GroupNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.groups))
	for g := range m.groups {
		out = append(out, g)
	}
	return out
}

// Group returns a copy of group's registration; ok is false if no member
// is online.
func (m *Consumers) Group(group string) (ConsumerGroupView, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil || len(g.members) == 0 {
		return ConsumerGroupView{}, false
	}
	v := ConsumerGroupView{ConsumerGroupMode: g.mode, Subscriptions: make(map[string]*Subscription, len(g.subs))}
	for _, mb := range g.members {
		v.Members = append(v.Members, *mb)
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].ID < v.Members[j].ID })
	for t, s := range g.subs {
		v.Subscriptions[t] = s
	}
	return v, true
}

// Members returns how many members of group are online and the group's
// message model ("" with none online).
func (m *Consumers) Members(group string) (online int, messageModel string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil || len(g.members) == 0 {
		return 0, ""
	}
	return len(g.members), g.mode.MessageModel
}

// Counts returns the number of groups with a member online and of members.
func (m *Consumers) Counts() (groups, members int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.groups {
		members += len(g.members)
	}
	return len(m.groups), members
}

// addSubscribed adds to out every (topic, group) an online consumer
// subscribes to, with no offsets if the group has none on the topic.
func (m *Consumers) addSubscribed(out store.ConsumerOffsets) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, g := range m.groups {
		for topic := range g.subs {
			groups := out[topic]
			if groups == nil {
				groups = map[string]map[int32]int64{}
				out[topic] = groups
			}
			if groups[name] == nil {
				groups[name] = map[int32]int64{}
			}
		}
	}
}
