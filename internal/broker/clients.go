package broker

// HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
// CHECK_CLIENT_CONFIG (46), and the producer and consumer registries.
//
// A heartbeat registers the client's producer groups and consumer groups
// under its connection. For each consumer group the broker creates the
// subscription group (if allowed) and %RETRY%<group> (registered with the
// NameServers at once), and replaces the group's subscriptions with the ones
// received (the latest heartbeat wins, as in RocketMQ). Both client dialects
// parse: codeSet strings (Go) or numbers (Java) are ignored because codes are
// recomputed; subVersion may be nanoseconds (Go) or milliseconds (Java),
// numbers or strings.
//
// Membership is keyed by clientID within a group and remembers the
// connection. A member leaves on connection close (the Go client never sends
// UNREGISTER_CLIENT), on UNREGISTER_CLIENT, or after ChannelExpiredTimeout
// without a heartbeat. Whenever a group's member set changes, every remaining
// member gets NOTIFY_CONSUMER_IDS_CHANGED (oneway) so it rebalances at once.

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
)

// flexInt accepts a JSON number or a decimal string.
type flexInt int64

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*f = 0
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		fl, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return err
		}
		n = int64(fl)
	}
	*f = flexInt(n)
	return nil
}

type heartbeatBody struct {
	ClientID        string `json:"clientID"`
	ProducerDataSet []struct {
		GroupName string `json:"groupName"`
	} `json:"producerDataSet"`
	ConsumerDataSet []consumerData `json:"consumerDataSet"`
}

type consumerData struct {
	GroupName           string             `json:"groupName"`
	ConsumeType         string             `json:"consumeType"`
	MessageModel        string             `json:"messageModel"`
	ConsumeFromWhere    string             `json:"consumeFromWhere"`
	SubscriptionDataSet []subscriptionData `json:"subscriptionDataSet"`
}

type subscriptionData struct {
	Topic          string   `json:"topic"`
	SubString      string   `json:"subString"`
	TagsSet        []string `json:"tagsSet"`
	SubVersion     flexInt  `json:"subVersion"`
	ExpressionType string   `json:"expressionType"`
}

func (b *Broker) handleHeartbeat(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	var hb heartbeatBody
	if err := json.Unmarshal(req.Body, &hb); err != nil {
		return nil, protoErrorf(remoting.ResInvalidParameter, "bad heartbeat body: %v", err)
	}
	if hb.ClientID == "" {
		return nil, protoErrorf(remoting.ResInvalidParameter, "heartbeat without clientID")
	}
	cl := clientInfo{language: clientLanguage(req.Language), version: int(req.Version)}
	for _, cd := range hb.ConsumerDataSet {
		if err := b.registerConsumer(c, hb.ClientID, cl, cd); err != nil {
			return nil, err
		}
	}
	for _, pd := range hb.ProducerDataSet {
		if pd.GroupName != "" {
			b.producers.register(pd.GroupName, hb.ClientID, c)
		}
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

// clientInfo is what a heartbeat's header says about the client: its
// language and its MQVersion ordinal.
type clientInfo struct {
	language string
	version  int
}

// languageCodes are the names of Java's LanguageCode enum; a client
// claiming anything else is reported as OTHER so Java tools can parse it.
var languageCodes = map[string]bool{"JAVA": true, "CPP": true, "DOTNET": true, "PYTHON": true, "DELPHI": true,
	"ERLANG": true, "RUBY": true, "OTHER": true, "HTTP": true, "GO": true, "PHP": true, "OMS": true, "RUST": true}

func clientLanguage(s string) string {
	if s = strings.ToUpper(strings.TrimSpace(s)); languageCodes[s] {
		return s
	}
	return "OTHER"
}

func (b *Broker) registerConsumer(c *remoting.Conn, clientID string, cl clientInfo, cd consumerData) error {
	if cd.GroupName == "" {
		return protoErrorf(remoting.ResInvalidParameter, "heartbeat consumer data without groupName")
	}
	g, err := b.core.EnsureGroup(cd.GroupName)
	if err != nil {
		return err
	}
	if g.RetryQueueNums > 0 {
		retry := RetryTopic(cd.GroupName)
		if err := core.ValidateTopic(retry); err != nil {
			return protoErrorf(remoting.ResInvalidParameter, "consumer group %q is too long for its retry topic", cd.GroupName)
		}
		if _, err := b.EnsureTopic(retry, g.RetryQueueNums, core.PermRW); err != nil && !core.IsNoSpace(err) {
			return err // for lack of space a later heartbeat retries (core/diskfull.go)
		}
	}
	subs := make(map[string]*subscription, len(cd.SubscriptionDataSet))
	for _, sd := range cd.SubscriptionDataSet {
		expr := sd.SubString
		if expr == "" && len(sd.TagsSet) > 0 {
			expr = strings.Join(sd.TagsSet, "||")
		}
		s, err := parseSubscription(sd.Topic, expr, sd.ExpressionType, int64(sd.SubVersion))
		if err != nil {
			// Kept as a failing subscription: pulls report the reason.
			s = &subscription{topic: sd.Topic, subString: sd.SubString, expressionType: sd.ExpressionType, err: err}
		}
		subs[sd.Topic] = s
	}
	b.consumers.register(cd, clientID, cl, c, subs, g.NotifyConsumerIDsChangedEnable)
	return nil
}

func (b *Broker) handleUnregisterClient(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	clientID := e.required("clientID")
	if e.err != nil {
		return nil, e.err
	}
	if g := e.str("producerGroup"); g != "" {
		b.producers.unregister(g, clientID)
	}
	if g := e.str("consumerGroup"); g != "" {
		b.consumers.unregister(g, clientID)
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

func (b *Broker) handleGetConsumerList(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group := e.required("consumerGroup")
	if e.err != nil {
		return nil, e.err
	}
	ids := b.consumers.clientIDs(group)
	if len(ids) == 0 {
		return nil, protoErrorf(remoting.ResSystemError, "no consumer for this group, %s", group)
	}
	body, err := json.Marshal(map[string][]string{"consumerIdList": ids})
	if err != nil {
		return nil, err
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp, nil
}

func (b *Broker) handleCheckClientConfig(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	var body struct {
		SubscriptionData subscriptionData `json:"subscriptionData"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		return nil, protoErrorf(remoting.ResInvalidParameter, "bad body: %v", err)
	}
	t := body.SubscriptionData.ExpressionType
	if t != "" && !strings.EqualFold(t, "TAG") {
		return nil, protoErrorf(remoting.ResSystemError, "%s", errSQL92)
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

// ---- consumer registry ----

type member struct {
	conn     *remoting.Conn
	client   clientInfo // from the latest heartbeat
	lastSeen time.Time
}

type consumerGroup struct {
	consumeType      string
	messageModel     string
	consumeFromWhere string
	subs             map[string]*subscription
	members          map[string]*member // by clientID
	notify           bool
}

type consumerManager struct {
	b *Broker

	mu     sync.Mutex
	groups map[string]*consumerGroup
}

func newConsumerManager(b *Broker) *consumerManager {
	return &consumerManager{b: b, groups: make(map[string]*consumerGroup)}
}

func (m *consumerManager) register(cd consumerData, clientID string, cl clientInfo, c *remoting.Conn, subs map[string]*subscription, notify bool) {
	m.mu.Lock()
	g := m.groups[cd.GroupName]
	if g == nil {
		g = &consumerGroup{members: make(map[string]*member)}
		m.groups[cd.GroupName] = g
	}
	g.consumeType, g.messageModel, g.consumeFromWhere = cd.ConsumeType, cd.MessageModel, cd.ConsumeFromWhere
	g.subs, g.notify = subs, notify
	old := g.members[clientID]
	changed := old == nil || old.conn.ID() != c.ID()
	g.members[clientID] = &member{conn: c, client: cl, lastSeen: m.b.cfg.Now()}
	var targets []*remoting.Conn
	if changed && notify {
		targets = g.conns()
	}
	m.mu.Unlock()
	if changed {
		m.b.log.Info("consumer joined", "group", cd.GroupName, "client", clientID)
	}
	m.b.notifyIDsChanged(cd.GroupName, targets)
}

func (g *consumerGroup) conns() []*remoting.Conn {
	out := make([]*remoting.Conn, 0, len(g.members))
	for _, mb := range g.members {
		out = append(out, mb.conn)
	}
	return out
}

// removeWhere drops the members for which drop returns true and notifies
// the groups that changed.
func (m *consumerManager) removeWhere(drop func(group, clientID string, mb *member) bool) {
	type change struct {
		group   string
		targets []*remoting.Conn
	}
	var changes []change
	m.mu.Lock()
	for name, g := range m.groups {
		n := len(g.members)
		for id, mb := range g.members {
			if drop(name, id, mb) {
				delete(g.members, id)
				m.b.log.Info("consumer left", "group", name, "client", id)
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
			changes = append(changes, change{name, g.conns()})
		}
	}
	m.mu.Unlock()
	for _, ch := range changes {
		m.b.notifyIDsChanged(ch.group, ch.targets)
	}
}

func (m *consumerManager) removeConn(c *remoting.Conn) {
	id := c.ID()
	m.removeWhere(func(_, _ string, mb *member) bool { return mb.conn.ID() == id })
}

func (m *consumerManager) unregister(group, clientID string) {
	m.removeWhere(func(g, id string, _ *member) bool { return g == group && id == clientID })
}

func (m *consumerManager) expire(timeout time.Duration) {
	deadline := m.b.cfg.Now().Add(-timeout)
	m.removeWhere(func(_, _ string, mb *member) bool { return mb.lastSeen.Before(deadline) })
}

func (m *consumerManager) clientIDs(group string) []string {
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

// groupView is what a pull needs to know about a consumer group.
type groupView struct {
	messageModel string
	sub          *subscription
}

// lookup returns the group's message model and its subscription to topic;
// ok is false if no member of the group is registered.
func (m *consumerManager) lookup(group, topic string) (groupView, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil {
		return groupView{}, false
	}
	return groupView{messageModel: g.messageModel, sub: g.subs[topic]}, true
}

// notifyIDsChanged sends NOTIFY_CONSUMER_IDS_CHANGED to each connection.
func (b *Broker) notifyIDsChanged(group string, targets []*remoting.Conn) {
	for _, c := range targets {
		req := remoting.NewRequest(remoting.ReqNotifyConsumerIDsChanged, map[string]string{"consumerGroup": group}, nil)
		req.Flag |= remoting.FlagOneway
		if err := c.InvokeOneway(req); err != nil {
			b.log.Debug("notify consumer ids changed failed", "group", group, "err", err)
		}
	}
}

// ---- producer registry ----

type producerEntry struct {
	clientID string
	conn     *remoting.Conn
	lastSeen time.Time
}

type producerManager struct {
	now func() time.Time

	mu     sync.Mutex
	groups map[string]map[uint64]*producerEntry // group -> conn id -> entry
}

func newProducerManager(now func() time.Time) *producerManager {
	return &producerManager{now: now, groups: make(map[string]map[uint64]*producerEntry)}
}

func (m *producerManager) register(group, clientID string, c *remoting.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil {
		g = make(map[uint64]*producerEntry)
		m.groups[group] = g
	}
	g[c.ID()] = &producerEntry{clientID: clientID, conn: c, lastSeen: m.now()}
}

func (m *producerManager) removeWhere(drop func(group string, e *producerEntry) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, g := range m.groups {
		for id, e := range g {
			if drop(name, e) {
				delete(g, id)
			}
		}
		if len(g) == 0 {
			delete(m.groups, name)
		}
	}
}

func (m *producerManager) removeConn(c *remoting.Conn) {
	id := c.ID()
	m.removeWhere(func(_ string, e *producerEntry) bool { return e.conn.ID() == id })
}

func (m *producerManager) unregister(group, clientID string) {
	m.removeWhere(func(g string, e *producerEntry) bool { return g == group && e.clientID == clientID })
}

func (m *producerManager) expire(timeout time.Duration) {
	deadline := m.now().Add(-timeout)
	m.removeWhere(func(_ string, e *producerEntry) bool { return e.lastSeen.Before(deadline) })
}

// anyConn returns the most recently seen connection of a producer group.
func (m *producerManager) anyConn(group string) *remoting.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best *producerEntry
	for _, e := range m.groups[group] {
		if best == nil || e.lastSeen.After(best.lastSeen) {
			best = e
		}
	}
	if best == nil {
		return nil
	}
	return best.conn
}
