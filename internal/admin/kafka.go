package admin

// The Kafka front door's consumer groups and connections (Keel's
// LIST_KAFKA), and a group described as kafka-consumer-groups.sh
// --describe shows it: one row per partition with the group's committed
// offset, the log end, the lag and the member the partition is assigned
// to.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/keelmq/keel/internal/kafkainfo"
	"github.com/keelmq/keel/internal/remoting"
)

// KafkaGroup is a Kafka consumer group the door coordinates.
type KafkaGroup = kafkainfo.Group

// KafkaMember is one member of a Kafka group, with its assignment.
type KafkaMember = kafkainfo.Member

// KafkaAssignment is a member's partitions of one topic.
type KafkaAssignment = kafkainfo.Assignment

// KafkaConnection is one open Kafka client connection.
type KafkaConnection = kafkainfo.Connection

// BrokerKafka is one broker's Kafka front door. Enabled is false when the
// broker serves no Kafka listener.
type BrokerKafka struct {
	Broker      string            `json:"broker"`
	Addr        string            `json:"addr"`
	Enabled     bool              `json:"enabled"`
	Groups      []KafkaGroup      `json:"groups"`
	Connections []KafkaConnection `json:"connections"`
	Err         string            `json:"error,omitempty"`
}

// Kafka asks every master for its Kafka groups and connections. A broker
// that does not answer is reported in its Err field.
func (c *Client) Kafka(ctx context.Context) ([]BrokerKafka, error) {
	masters, err := c.Masters(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]BrokerKafka, 0, len(masters))
	for _, b := range masters {
		out = append(out, c.kafkaOf(ctx, b))
	}
	return out, nil
}

func (c *Client) kafkaOf(ctx context.Context, b Broker) BrokerKafka {
	bk := BrokerKafka{Broker: b.Name, Addr: b.Addr, Groups: []KafkaGroup{}, Connections: []KafkaConnection{}}
	resp, err := c.invoke(ctx, b.Addr, remoting.ReqListKafka, nil, nil)
	if err == nil {
		var rep struct {
			Enabled bool           `json:"enabled"`
			Info    kafkainfo.Info `json:"info"`
		}
		if err = json.Unmarshal(resp.Body, &rep); err != nil {
			err = fmt.Errorf("admin: decode the Kafka report of %s: %w", b.Name, err)
		} else {
			bk.Enabled = rep.Enabled
			if rep.Info.Groups != nil {
				bk.Groups = rep.Info.Groups
			}
			if rep.Info.Connections != nil {
				bk.Connections = rep.Info.Connections
			}
		}
	}
	if err != nil {
		bk.Err = err.Error()
	}
	return bk
}

// KafkaGroupRow is one row of a Kafka group's description, as
// kafka-consumer-groups.sh --describe prints it. CurrentOffset is -1 when
// the group committed nothing on the partition; a member assigned nothing
// has a row with an empty Topic and Partition -1.
type KafkaGroupRow struct {
	Group         string `json:"group"`
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	Broker        string `json:"broker"`
	CurrentOffset int64  `json:"currentOffset"`
	LogEndOffset  int64  `json:"logEndOffset"`
	Lag           int64  `json:"lag"`
	ConsumerID    string `json:"consumerId,omitempty"`
	Host          string `json:"host,omitempty"`
	ClientID      string `json:"clientId,omitempty"`
}

// KafkaGroupDetail is a Kafka group: its state and members (from the
// Kafka door) and its rows.
type KafkaGroupDetail struct {
	Group   string          `json:"group"`
	State   string          `json:"state"` // Dead when no door coordinates it (offsets only)
	Members int             `json:"members"`
	Lag     int64           `json:"lag"`
	Rows    []KafkaGroupRow `json:"rows"`
}

type partKey struct {
	broker, topic string
	partition     int32
}

// DescribeKafkaGroup describes group on every master: each partition it
// committed offsets on or is assigned, and each member. ErrNotFound when
// no broker knows the group.
func (c *Client) DescribeKafkaGroup(ctx context.Context, group string) (KafkaGroupDetail, error) {
	masters, err := c.Masters(ctx)
	if err != nil {
		return KafkaGroupDetail{}, err
	}
	topics, err := c.topicConfigs(ctx, true) // the masters': the Kafka door runs on them
	if err != nil {
		return KafkaGroupDetail{}, err
	}
	d := KafkaGroupDetail{Group: group, State: "Dead", Rows: []KafkaGroupRow{}}
	rows := map[partKey]*KafkaGroupRow{}
	row := func(k partKey) *KafkaGroupRow {
		r := rows[k]
		if r == nil {
			r = &KafkaGroupRow{Group: group, Topic: k.topic, Partition: k.partition, Broker: k.broker, CurrentOffset: -1}
			rows[k] = r
		}
		return r
	}
	for _, b := range masters {
		qs, err := c.consumeStats(ctx, b, group)
		if err != nil {
			return KafkaGroupDetail{}, err
		}
		for _, q := range qs {
			r := row(partKey{b.Name, q.Topic, q.QueueID})
			r.CurrentOffset, r.LogEndOffset = q.ConsumerOffset, q.BrokerOffset
		}
		bk := c.kafkaOf(ctx, b)
		if bk.Err != "" {
			return KafkaGroupDetail{}, fmt.Errorf("admin: %s", bk.Err)
		}
		for _, g := range bk.Groups {
			if g.Name != group {
				continue
			}
			d.State = g.State
			d.Members += len(g.Members)
			for _, m := range g.Members {
				if len(m.Assignment) == 0 {
					d.Rows = append(d.Rows, KafkaGroupRow{Group: group, Partition: -1, Broker: b.Name, CurrentOffset: -1,
						ConsumerID: m.MemberID, Host: m.Host, ClientID: m.ClientID})
				}
				for _, a := range m.Assignment {
					for _, p := range a.Partitions {
						r := row(partKey{b.Name, a.Topic, p})
						r.ConsumerID, r.Host, r.ClientID = m.MemberID, m.Host, m.ClientID
					}
				}
			}
		}
	}
	if len(rows) == 0 && len(d.Rows) == 0 && d.State == "Dead" {
		return KafkaGroupDetail{}, fmt.Errorf("%w: Kafka consumer group %q", ErrNotFound, group)
	}
	if err := c.fillLogEnds(ctx, rows, topics); err != nil {
		return KafkaGroupDetail{}, err
	}
	for _, r := range rows {
		if r.CurrentOffset >= 0 {
			r.Lag = max(r.LogEndOffset-r.CurrentOffset, 0)
		} else {
			r.Lag = 0
		}
		d.Lag += r.Lag
		d.Rows = append(d.Rows, *r)
	}
	sort.Slice(d.Rows, func(i, j int) bool {
		a, b := d.Rows[i], d.Rows[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.ConsumerID < b.ConsumerID
	})
	return d, nil
}

// fillLogEnds sets the log end of assigned partitions the group has no
// committed offset on (their consume stats are absent).
func (c *Client) fillLogEnds(ctx context.Context, rows map[partKey]*KafkaGroupRow, topics map[string][]TopicOnBroker) error {
	need := map[string]bool{}
	for k, r := range rows {
		if r.CurrentOffset < 0 {
			need[k.topic] = true
		}
	}
	for t := range need {
		bs, ok := topics[t]
		if !ok {
			continue
		}
		qs, err := c.queueStats(ctx, Topic{Name: t, Brokers: bs})
		if err != nil {
			return err
		}
		for _, q := range qs {
			if r := rows[partKey{q.Broker, t, q.QueueID}]; r != nil && r.CurrentOffset < 0 {
				r.LogEndOffset = q.MaxOffset
			}
		}
	}
	return nil
}
