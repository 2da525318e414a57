package broker

// HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38)
// and CHECK_CLIENT_CONFIG (46): the RocketMQ side of the core's registries
// of online producers and consumers (core/consumers.go, producers.go; a
// client is its clientID and its *remoting.Conn).
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
// member gets NOTIFY_CONSUMER_IDS_CHANGED (oneway) so it rebalances at once:
// the core says whom to tell, this file sends it.

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

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
	cl := core.Client{ID: hb.ClientID, Conn: c, Language: clientLanguage(req.Language), Version: int(req.Version)}
	for _, cd := range hb.ConsumerDataSet {
		if err := b.registerConsumer(cl, cd); err != nil {
			return nil, err
		}
	}
	for _, pd := range hb.ProducerDataSet {
		if pd.GroupName != "" {
			b.core.Producers().Register(pd.GroupName, cl)
		}
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
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

func (b *Broker) registerConsumer(cl core.Client, cd consumerData) error {
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
	subs := make(map[string]*core.Subscription, len(cd.SubscriptionDataSet))
	for _, sd := range cd.SubscriptionDataSet {
		expr := sd.SubString
		if expr == "" && len(sd.TagsSet) > 0 {
			expr = strings.Join(sd.TagsSet, "||")
		}
		s, err := core.ParseSubscription(sd.Topic, expr, sd.ExpressionType, int64(sd.SubVersion))
		if err != nil {
			// Kept as a failing subscription: pulls report the reason.
			s = core.FailedSubscription(sd.Topic, sd.SubString, sd.ExpressionType, err)
		}
		subs[sd.Topic] = s
	}
	mode := core.ConsumerGroupMode{ConsumeType: cd.ConsumeType, MessageModel: cd.MessageModel, ConsumeFromWhere: cd.ConsumeFromWhere}
	targets := b.core.Consumers().Register(cd.GroupName, mode, cl, subs, g.NotifyConsumerIDsChangedEnable)
	b.notifyIDsChanged(cd.GroupName, targets)
	return nil
}

func (b *Broker) handleUnregisterClient(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	clientID := e.required("clientID")
	if e.err != nil {
		return nil, e.err
	}
	if g := e.str("producerGroup"); g != "" {
		b.core.Producers().Unregister(g, clientID)
	}
	if g := e.str("consumerGroup"); g != "" {
		b.notifyChanges(b.core.Consumers().Unregister(g, clientID))
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

func (b *Broker) handleGetConsumerList(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group := e.required("consumerGroup")
	if e.err != nil {
		return nil, e.err
	}
	ids := b.core.Consumers().ClientIDs(group)
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
	if err := core.CheckFilterType(body.SubscriptionData.ExpressionType); err != nil {
		return nil, err
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

// removeConn unregisters every producer and consumer of a closed
// connection and tells the consumer groups that lost a member.
func (b *Broker) removeConn(c *remoting.Conn) {
	b.core.Producers().RemoveConn(c)
	b.notifyChanges(b.core.Consumers().RemoveConn(c))
}

// expireClients drops the producers and consumers silent for
// ChannelExpiredTimeout.
func (b *Broker) expireClients() {
	b.core.Producers().Expire(b.cfg.ChannelExpiredTimeout)
	b.notifyChanges(b.core.Consumers().Expire(b.cfg.ChannelExpiredTimeout))
}

func (b *Broker) notifyChanges(changes []core.MembershipChange) {
	for _, ch := range changes {
		b.notifyIDsChanged(ch.Group, ch.Conns)
	}
}

// notifyIDsChanged sends NOTIFY_CONSUMER_IDS_CHANGED to each connection.
func (b *Broker) notifyIDsChanged(group string, targets []any) {
	for _, t := range targets {
		c, ok := t.(*remoting.Conn)
		if !ok {
			continue // a member registered by another front door
		}
		req := remoting.NewRequest(remoting.ReqNotifyConsumerIDsChanged, map[string]string{"consumerGroup": group}, nil)
		req.Flag |= remoting.FlagOneway
		if err := c.InvokeOneway(req); err != nil {
			b.log.Debug("notify consumer ids changed failed", "group", group, "err", err)
		}
	}
}
