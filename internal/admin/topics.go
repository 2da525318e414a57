package admin

// Topics: list (GET_ALL_TOPIC_CONFIG of every master), describe
// (GET_TOPIC_STATS_INFO), create and update (UPDATE_AND_CREATE_TOPIC on
// every master, the masters of one cluster, one master by address or the
// named brokers), delete (DELETE_TOPIC_IN_BROKER on the chosen masters
// hosting it, then DELETE_TOPIC_IN_NAMESRV of their queues).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// Permission bits of a topic.
const (
	PermInherit int32 = 0x1
	PermWrite   int32 = 0x2
	PermRead    int32 = 0x4
	PermRW            = PermRead | PermWrite
)

// ErrTopicExists is returned by CreateTopic for a topic that exists.
var ErrTopicExists = errors.New("admin: topic already exists")

// Topic kinds (message.TopicKind, as strings).
const (
	KindNormal = string(message.TopicNormal)
	KindRetry  = string(message.TopicRetry)
	KindDLQ    = string(message.TopicDLQ)
	KindSystem = string(message.TopicSystem)
)

// Retry and dead-letter topic prefixes.
const (
	RetryPrefix = message.RetryTopicPrefix
	DLQPrefix   = message.DLQTopicPrefix
)

// TopicKind classifies a topic name (message.KindOfTopic).
func TopicKind(name string) string { return string(message.KindOfTopic(name)) }

// PermString renders permission bits as "RW", "R-", "-W" or "--".
func PermString(p int32) string {
	b := []byte("--")
	if p&PermRead != 0 {
		b[0] = 'R'
	}
	if p&PermWrite != 0 {
		b[1] = 'W'
	}
	return string(b)
}

// ParsePerm accepts rw, r, w, none (any case) or the decimal bits.
func ParsePerm(s string) (int32, error) {
	switch strings.ToLower(s) {
	case "rw", "wr":
		return PermRW, nil
	case "r":
		return PermRead, nil
	case "w":
		return PermWrite, nil
	case "none", "-", "--":
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 || n > 7 {
		return 0, fmt.Errorf("admin: permission %q: want rw, r, w, none or 0..7", s)
	}
	return int32(n), nil
}

// TopicConfig is a topic's configuration on one broker.
type TopicConfig struct {
	Topic       string `json:"topicName"`
	ReadQueues  int32  `json:"readQueueNums"`
	WriteQueues int32  `json:"writeQueueNums"`
	Perm        int32  `json:"perm"`
	SysFlag     int32  `json:"topicSysFlag"`
	Order       bool   `json:"order"`
}

// TopicOnBroker is a topic's configuration on one broker.
type TopicOnBroker struct {
	Broker string `json:"broker"`
	Addr   string `json:"addr"`
	TopicConfig
}

// Topic is a topic across the cluster.
type Topic struct {
	Name    string          `json:"topic"`
	Kind    string          `json:"kind"`
	Brokers []TopicOnBroker `json:"brokers"`
	// Messages is the number of messages still stored (max - min offset,
	// summed over the queues); -1 when the stats were not asked for.
	Messages int64 `json:"messages"`
	// Written is the sum of the queues' max offsets: every message ever
	// stored (its rate is the topic's throughput); -1 without stats.
	Written int64 `json:"written"`
}

// ReadQueues is the sum over brokers.
func (t Topic) ReadQueues() int32 {
	var n int32
	for _, b := range t.Brokers {
		n += b.ReadQueues
	}
	return n
}

// WriteQueues is the sum over brokers.
func (t Topic) WriteQueues() int32 {
	var n int32
	for _, b := range t.Brokers {
		n += b.WriteQueues
	}
	return n
}

// Perm is the permission shared by every broker, or the first broker's.
func (t Topic) Perm() int32 {
	if len(t.Brokers) == 0 {
		return 0
	}
	return t.Brokers[0].Perm
}

// QueueStat is one queue's offsets.
type QueueStat struct {
	Broker     string `json:"broker"`
	QueueID    int32  `json:"queueId"`
	MinOffset  int64  `json:"minOffset"`
	MaxOffset  int64  `json:"maxOffset"`
	Messages   int64  `json:"messages"`
	LastUpdate int64  `json:"lastUpdateTimestamp,omitempty"`
}

// TopicDetail is a topic with its queues.
type TopicDetail struct {
	Topic
	Queues []QueueStat `json:"queues"`
}

// topicConfigs returns the topic table of every broker group: of every
// master for a write, else of the brokers ReadBrokers chooses.
func (c *Client) topicConfigs(ctx context.Context, write bool) (map[string][]TopicOnBroker, error) {
	pick := c.ReadBrokers
	if write {
		pick = c.Masters
	}
	brokers, err := pick(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]TopicOnBroker)
	for _, b := range brokers {
		resp, err := c.invoke(ctx, b.Addr, remoting.ReqGetAllTopicConfig, nil, nil)
		if err != nil {
			return nil, err
		}
		var body struct {
			TopicConfigTable map[string]TopicConfig `json:"topicConfigTable"`
		}
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			return nil, fmt.Errorf("admin: decode topic table of %s: %w", b.Name, err)
		}
		for name, tc := range body.TopicConfigTable {
			tc.Topic = name
			out[name] = append(out[name], TopicOnBroker{Broker: b.Name, Addr: b.Addr, TopicConfig: tc})
		}
	}
	return out, nil
}

// Topics lists the topics of every broker group (ReadBrokers), sorted by name. System
// topics are left out unless withSystem; with stats each topic's message
// count is asked for (one request per topic and broker).
func (c *Client) Topics(ctx context.Context, withSystem, stats bool) ([]Topic, error) {
	tables, err := c.topicConfigs(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []Topic
	for name, bs := range tables {
		t := Topic{Name: name, Kind: TopicKind(name), Brokers: bs, Messages: -1, Written: -1}
		if t.Kind == KindSystem && !withSystem {
			continue
		}
		sort.Slice(t.Brokers, func(i, j int) bool { return t.Brokers[i].Broker < t.Brokers[j].Broker })
		if stats {
			qs, err := c.queueStats(ctx, t)
			if err != nil {
				return nil, err
			}
			t.Messages, t.Written = sumMessages(qs), sumWritten(qs)
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func sumWritten(qs []QueueStat) int64 {
	var n int64
	for _, q := range qs {
		n += q.MaxOffset
	}
	return n
}

func sumMessages(qs []QueueStat) int64 {
	var n int64
	for _, q := range qs {
		n += q.Messages
	}
	return n
}

// Topic returns one topic's configuration, read as ReadBrokers says;
// ErrNotFound if no broker group has it.
func (c *Client) Topic(ctx context.Context, name string) (Topic, error) {
	return c.topic(ctx, name, false)
}

// topic returns one topic's configuration on the masters (write) or the
// brokers ReadBrokers chooses.
func (c *Client) topic(ctx context.Context, name string, write bool) (Topic, error) {
	tables, err := c.topicConfigs(ctx, write)
	if err != nil {
		return Topic{}, err
	}
	bs, ok := tables[name]
	if !ok {
		return Topic{}, fmt.Errorf("%w: topic %q", ErrNotFound, name)
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].Broker < bs[j].Broker })
	return Topic{Name: name, Kind: TopicKind(name), Brokers: bs, Messages: -1, Written: -1}, nil
}

// DescribeTopic returns a topic with its queues' offsets.
func (c *Client) DescribeTopic(ctx context.Context, name string) (TopicDetail, error) {
	t, err := c.Topic(ctx, name)
	if err != nil {
		return TopicDetail{}, err
	}
	qs, err := c.queueStats(ctx, t)
	if err != nil {
		return TopicDetail{}, err
	}
	t.Messages, t.Written = sumMessages(qs), sumWritten(qs)
	return TopicDetail{Topic: t, Queues: qs}, nil
}

type wireTopicOffset struct {
	MinOffset           int64 `json:"minOffset"`
	MaxOffset           int64 `json:"maxOffset"`
	LastUpdateTimestamp int64 `json:"lastUpdateTimestamp"`
}

// queueStats asks each broker of t for its queues' offsets.
func (c *Client) queueStats(ctx context.Context, t Topic) ([]QueueStat, error) {
	var out []QueueStat
	for _, b := range t.Brokers {
		resp, err := c.invoke(ctx, b.Addr, remoting.ReqGetTopicStatsInfo, map[string]string{"topic": t.Name}, nil)
		if err != nil {
			return nil, err
		}
		table, err := decodeMQTable[wireTopicOffset](resp.Body, "offsetTable")
		if err != nil {
			return nil, err
		}
		for mq, o := range table {
			out = append(out, QueueStat{Broker: b.Broker, QueueID: mq.QueueID, MinOffset: o.MinOffset,
				MaxOffset: o.MaxOffset, Messages: o.MaxOffset - o.MinOffset, LastUpdate: o.LastUpdateTimestamp})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Broker != out[j].Broker {
			return out[i].Broker < out[j].Broker
		}
		return out[i].QueueID < out[j].QueueID
	})
	return out, nil
}

// Where chooses the masters a topic change goes to, as mqadmin's -c and
// -b do: the zero value is every master, Cluster the masters of one
// cluster (brokerClusterName), BrokerAddr the one master at that address.
type Where struct {
	Cluster    string
	BrokerAddr string
}

// explicit reports whether w names masters rather than all of them.
func (w Where) explicit() bool { return w.Cluster != "" || w.BrokerAddr != "" }

// TopicSpec describes a topic to create.
type TopicSpec struct {
	Topic       string
	ReadQueues  int32
	WriteQueues int32
	Perm        int32
	Order       bool
	// Brokers names the brokers to create it on; empty means every master
	// that Where chooses.
	Brokers []string
	Where
}

// CreateTopic creates a topic on the chosen masters. It fails with
// ErrTopicExists if any of them has it already (use UpdateTopic); a
// master not chosen may have it (so a topic reaches a group added later).
func (c *Client) CreateTopic(ctx context.Context, spec TopicSpec) error {
	targets, err := c.pickMasters(ctx, spec.Where, spec.Brokers)
	if err != nil {
		return err
	}
	tables, err := c.topicConfigs(ctx, true)
	if err != nil {
		return err
	}
	for _, b := range tables[spec.Topic] {
		for _, tb := range targets {
			if tb.Name == b.Broker {
				return fmt.Errorf("%w: %q on broker %s (use topic update)", ErrTopicExists, spec.Topic, b.Broker)
			}
		}
	}
	tc := TopicConfig{Topic: spec.Topic, ReadQueues: spec.ReadQueues, WriteQueues: spec.WriteQueues,
		Perm: spec.Perm, Order: spec.Order}
	for _, b := range targets {
		if err := c.putTopic(ctx, b.Addr, tc); err != nil {
			return err
		}
	}
	return nil
}

// pickMasters returns the masters w chooses, narrowed to the broker names
// given. A cluster without a master, an address that is not a registered
// master, or a name not among the chosen masters is an error.
func (c *Client) pickMasters(ctx context.Context, w Where, names []string) ([]Broker, error) {
	masters, err := c.whereMasters(ctx, w)
	if err != nil || len(names) == 0 {
		return masters, err
	}
	var out []Broker
	for _, n := range names {
		found := false
		for _, b := range masters {
			if b.Name == n {
				out, found = append(out, b), true
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: broker %q", ErrNotFound, n)
		}
	}
	return out, nil
}

// whereMasters returns the masters w chooses, sorted by name.
func (c *Client) whereMasters(ctx context.Context, w Where) ([]Broker, error) {
	if w.Cluster != "" && w.BrokerAddr != "" {
		return nil, errors.New("admin: give a cluster or a broker address, not both")
	}
	if w.BrokerAddr != "" {
		all, err := c.Brokers(ctx)
		if err != nil {
			return nil, err
		}
		for _, b := range all {
			if b.Addr != w.BrokerAddr {
				continue
			}
			if b.ID != 0 {
				return nil, fmt.Errorf("admin: broker %s is broker %d of group %s, a slave: topics are changed on the group's master", w.BrokerAddr, b.ID, b.Name)
			}
			return []Broker{b}, nil
		}
		return nil, fmt.Errorf("%w: no broker is registered at %s", ErrNotFound, w.BrokerAddr)
	}
	masters, err := c.Masters(ctx)
	if err != nil || w.Cluster == "" {
		return masters, err
	}
	var out []Broker
	for _, b := range masters {
		if b.Cluster == w.Cluster {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: cluster %q has no master registered", ErrNotFound, w.Cluster)
	}
	return out, nil
}

func (c *Client) putTopic(ctx context.Context, addr string, tc TopicConfig) error {
	_, err := c.invoke(ctx, addr, remoting.ReqUpdateAndCreateTopic, map[string]string{
		"topic": tc.Topic, "defaultTopic": "TBW102",
		"readQueueNums":   strconv.Itoa(int(tc.ReadQueues)),
		"writeQueueNums":  strconv.Itoa(int(tc.WriteQueues)),
		"perm":            strconv.Itoa(int(tc.Perm)),
		"topicFilterType": "SINGLE_TAG",
		"topicSysFlag":    strconv.Itoa(int(tc.SysFlag)),
		"order":           strconv.FormatBool(tc.Order),
	}, nil)
	return err
}

// UpdateTopic applies change to the topic's configuration on every broker
// that hosts it.
func (c *Client) UpdateTopic(ctx context.Context, name string, change func(*TopicConfig)) error {
	return c.UpdateTopicAt(ctx, name, Where{}, change)
}

// UpdateTopicAt applies change to the topic's configuration on the masters
// w chooses. With w naming a cluster or a broker, a chosen master that
// does not have the topic yet gets it too, configured as the first master
// that has it with change applied (as mqadmin updateTopic -c does); with
// the zero w only the masters that have it are changed. ErrNotFound if no
// master has the topic.
func (c *Client) UpdateTopicAt(ctx context.Context, name string, w Where, change func(*TopicConfig)) error {
	targets, err := c.whereMasters(ctx, w)
	if err != nil {
		return err
	}
	t, err := c.topic(ctx, name, true)
	if err != nil {
		return err
	}
	has := make(map[string]TopicConfig, len(t.Brokers))
	for _, b := range t.Brokers {
		has[b.Broker] = b.TopicConfig
	}
	for _, b := range targets {
		tc, ok := has[b.Name]
		if !ok && !w.explicit() {
			continue
		}
		if !ok {
			tc = t.Brokers[0].TopicConfig
		}
		change(&tc)
		tc.Topic = name
		if err := c.putTopic(ctx, b.Addr, tc); err != nil {
			return err
		}
	}
	return nil
}

// DeleteTopic deletes a topic, its messages and its consumer offsets from
// every broker hosting it and its route from the NameServers.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	return c.DeleteTopicAt(ctx, name, Where{})
}

// DeleteTopicAt deletes a topic, its messages and its consumer offsets
// from the masters w chooses that host it (their slaves follow by
// replication), and their queues of it from the NameServers' routes.
// ErrNotFound if none of them hosts it.
func (c *Client) DeleteTopicAt(ctx context.Context, name string, w Where) error {
	targets, err := c.whereMasters(ctx, w)
	if err != nil {
		return err
	}
	t, err := c.topic(ctx, name, true)
	if err != nil {
		return err
	}
	chosen := make(map[string]bool, len(targets))
	for _, b := range targets {
		chosen[b.Name] = true
	}
	var hosts []TopicOnBroker
	for _, b := range t.Brokers {
		if chosen[b.Broker] {
			hosts = append(hosts, b)
		}
	}
	if len(hosts) == 0 {
		return fmt.Errorf("%w: topic %q on the chosen masters", ErrNotFound, name)
	}
	for _, b := range hosts {
		if _, err := c.invoke(ctx, b.Addr, remoting.ReqDeleteTopicInBroker, map[string]string{"topic": name}, nil); err != nil {
			return err
		}
	}
	// The whole route when every host went; else only the deleted groups'
	// queues, so the other groups keep serving it.
	var routes []map[string]string
	if len(hosts) == len(t.Brokers) {
		routes = append(routes, map[string]string{"topic": name})
	} else {
		for _, b := range hosts {
			routes = append(routes, map[string]string{"topic": name, "brokerName": b.Broker})
		}
	}
	var errs []error
	for _, addr := range c.cfg.NamesrvAddrs {
		for _, ext := range routes {
			if _, err := c.invoke(ctx, addr, remoting.ReqDeleteTopicInNamesrv, ext, nil); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
