package core

// Topic configuration: which topics this broker hosts, their read/write queue
// counts, permission bits, sysflag and order flag.
//
// The table is persisted crash-safely as <DataDir>/config/topics.json
// ({"topicConfigTable":{...},"dataVersion":{...}}, RocketMQ's layout) and
// every change is on disk before it is used. Topics are created
//   - explicitly (UpdateTopic; RocketMQ's UPDATE_AND_CREATE_TOPIC),
//   - on send, from the template topic named by the producer (TBW102), when
//     the template exists and has the INHERIT permission (autoCreateTopicEnable),
//   - for consumer groups: %RETRY%<group> on heartbeat and send-back, and
//     %DLQ%<group> when a message exhausts its retries (1 queue each, RW).
//
// Every change is announced (Config.OnTopicsChanged: the RocketMQ adapter
// registers with the NameServers soon, not at the next periodic
// registration, so clients find the route). Concurrent
// creations share one write of topics.json (persist.go); each is
// acknowledged only after that write completed.

import (
	"fmt"
	"sort"
	"strings"
)

// TopicConfig is one topic's configuration (RocketMQ TopicConfig JSON).
type TopicConfig struct {
	TopicName       string            `json:"topicName"`
	ReadQueueNums   int32             `json:"readQueueNums"`
	WriteQueueNums  int32             `json:"writeQueueNums"`
	Perm            int32             `json:"perm"`
	TopicFilterType string            `json:"topicFilterType"`
	TopicSysFlag    int32             `json:"topicSysFlag"`
	Order           bool              `json:"order"`
	Attributes      map[string]string `json:"attributes"`
}

// Readable reports whether the topic may be consumed.
func (tc TopicConfig) Readable() bool { return tc.Perm&PermRead != 0 }

// Writable reports whether the topic accepts messages.
func (tc TopicConfig) Writable() bool { return tc.Perm&PermWrite != 0 }

// QueueNums is the number of valid queue ids (max of read and write counts).
func (tc TopicConfig) QueueNums() int32 { return max(tc.ReadQueueNums, tc.WriteQueueNums) }

// NewTopicConfig returns the configuration of a topic with the given queue
// count (read and write) and permission bits.
func NewTopicConfig(name string, queues, perm int32) TopicConfig {
	return TopicConfig{
		TopicName: name, ReadQueueNums: queues, WriteQueueNums: queues, Perm: perm,
		TopicFilterType: "SINGLE_TAG", Attributes: map[string]string{},
	}
}

// topicNameChars are the bytes a topic name may hold: ^[%|a-zA-Z0-9_-]+$
// (checked with a table: a regexp match was 4% of the send path's CPU).
var topicNameChars = func() (t [256]bool) {
	for _, c := range []byte("%|_-") {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	return t
}()

func validTopicChars(topic string) bool {
	for i := 0; i < len(topic); i++ {
		if !topicNameChars[topic[i]] {
			return false
		}
	}
	return true
}

// ValidateTopic checks a client-supplied topic name. Every stored topic must
// fit the 1-byte TOPICLEN of the V1 record, so 127 bytes is the limit for all
// topics, retry and DLQ topics included.
func ValidateTopic(topic string) error {
	switch {
	case topic == "":
		return Errorf(ErrInvalidArgument, "the specified topic is blank")
	case len(topic) > 127:
		return Errorf(ErrInvalidArgument, "the specified topic is longer than 127 bytes")
	case !validTopicChars(topic):
		return Errorf(ErrInvalidArgument, "the specified topic[%s] contains illegal characters, allowing only ^[%%|a-zA-Z0-9_-]+$", topic)
	}
	return nil
}

// ValidateKafkaTopic checks a topic name a Kafka client gives (CreateTopics,
// and creation on Metadata or Produce): Kafka's characters [a-zA-Z0-9._-],
// neither "." nor "..", at most 127 bytes (the record's TOPICLEN; Kafka
// allows 249). RocketMQ clients keep ValidateTopic's rule, which refuses
// '.'; '%' and '|', which RocketMQ's retry and DLQ names use, are not
// Kafka's, so a Kafka-created name never looks like a RocketMQ system one.
func ValidateKafkaTopic(topic string) error {
	switch {
	case topic == "":
		return Errorf(ErrInvalidArgument, "the specified topic is blank")
	case len(topic) > 127:
		return Errorf(ErrInvalidArgument, "the specified topic is longer than 127 bytes")
	case topic == "." || topic == "..":
		return Errorf(ErrInvalidArgument, "the topic name %q is not allowed", topic)
	}
	for i := 0; i < len(topic); i++ {
		if c := topic[i]; c == '%' || c == '|' || c != '.' && !topicNameChars[c] {
			return Errorf(ErrInvalidArgument, "the specified topic[%s] contains illegal characters, allowing only ^[a-zA-Z0-9._-]+$", topic)
		}
	}
	return nil
}

// Topic returns the configuration of a topic.
func (b *Broker) Topic(name string) (TopicConfig, bool) { return b.topics.get(name) }

// DefaultQueueNums is the queue count of topics created without one
// (defaultTopicQueueNums).
func (b *Broker) DefaultQueueNums() int32 { return b.cfg.DefaultTopicQueueNums }

// Topics returns all topic configurations sorted by name.
func (b *Broker) Topics() []TopicConfig {
	m, _ := b.topics.all()
	out := make([]TopicConfig, 0, len(m))
	for _, tc := range m {
		out = append(out, tc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TopicName < out[j].TopicName })
	return out
}

// EnsureTopic creates a topic with the given queue count and permission
// unless it exists, persists it and announces it to the NameServers. It
// returns the configuration in effect. Schedule and transaction engines use
// it for their system topics.
func (b *Broker) EnsureTopic(name string, queues, perm int32) (TopicConfig, error) {
	tc, created, err := b.topics.createIfAbsent(name, NewTopicConfig(name, queues, perm))
	if err != nil {
		return TopicConfig{}, err
	}
	if created {
		b.log.Info("topic created", "topic", name, "queues", queues, "perm", perm)
		b.announce()
	}
	return tc, nil
}

// AutoCreateTopic resolves the topic of a send. An unknown topic is created
// from the template (defaultTopic) when the template exists and carries the
// INHERIT permission; a retry topic is created with 1 queue.
func (b *Broker) AutoCreateTopic(topic, template string, queues int32) (TopicConfig, error) {
	if tc, ok := b.topics.get(topic); ok {
		return tc, nil
	}
	if IsRetryTopic(topic) {
		return b.EnsureTopic(topic, 1, PermRW)
	}
	tpl, ok := b.topics.get(template)
	if !ok || tpl.Perm&PermInherit == 0 || (template == DefaultTopic && !b.cfg.AutoCreateTopicEnable) {
		return TopicConfig{}, Errorf(ErrTopicNotFound, "topic[%s] not exist, apply first please!", topic)
	}
	if queues <= 0 || queues > tpl.WriteQueueNums {
		queues = tpl.WriteQueueNums
	}
	return b.EnsureTopic(topic, queues, tpl.Perm&^PermInherit)
}

// initTopics installs the built-in topics (the table is loaded).
func (b *Broker) initTopics() error {
	if b.cfg.AutoCreateTopicEnable {
		if _, _, err := b.topics.createIfAbsent(DefaultTopic,
			NewTopicConfig(DefaultTopic, b.cfg.DefaultTopicQueueNums, PermInherit|PermRW)); err != nil {
			return err
		}
	} else if _, err := b.topics.remove(DefaultTopic); err != nil {
		return err
	}
	if _, _, err := b.topics.createIfAbsent(SelfTestTopic, NewTopicConfig(SelfTestTopic, 1, PermRW)); err != nil {
		return err
	}
	return nil
}

// DeleteTopic drops a topic's configuration, stored messages and consumer
// offsets. System topics cannot be deleted.
func (b *Broker) DeleteTopic(topic string) error {
	if isSystemTopic(topic) {
		return Errorf(ErrInvalidArgument, "the topic[%s] is a system topic and cannot be deleted", topic)
	}
	if b.sys.replica {
		// A replica's log and tables are its master's: a deletion here
		// would drop its copy of messages the master keeps.
		return Errorf(ErrForbidden, "this broker is a slave: delete the topic[%s] on the master of its group", topic)
	}
	if _, err := b.topics.remove(topic); err != nil {
		return err
	}
	if err := b.offsets.deleteTopic(topic); err != nil {
		b.log.Warn("topic's offsets deleted; the record of it is not confirmed", "topic", topic, "err", err)
	}
	if err := b.st.DeleteTopic(topic); err != nil {
		return fmt.Errorf("core: delete topic %s: %w", topic, err)
	}
	b.announce()
	b.log.Info("topic deleted", "topic", topic)
	return nil
}

// UpdateTopic creates or replaces a topic's configuration (an operator's
// request): the name is validated (system topics are refused), the queue
// counts must be in [1, MaxQueueNums] and the permission only read, write
// and inherit bits.
//
// An existing topic's name was checked when it was created (a Kafka client
// may have created it under Kafka's rule), and the attributes the Kafka
// door keeps in it (KafkaAttributePrefix) survive an update that does not
// carry them, as RocketMQ 5 keeps attributes an update does not name.
func (b *Broker) UpdateTopic(tc TopicConfig) error {
	old, exists := b.topics.get(tc.TopicName)
	if !exists {
		if err := ValidateTopic(tc.TopicName); err != nil {
			return err
		}
	}
	for k, v := range old.Attributes {
		if _, set := tc.Attributes[k]; !set && strings.HasPrefix(k, KafkaAttributePrefix) {
			if tc.Attributes == nil {
				tc.Attributes = map[string]string{}
			}
			tc.Attributes[k] = v
		}
	}
	return b.updateTopic(tc)
}

// KafkaAttributePrefix starts the names of the topic attributes the Kafka
// door keeps (per-topic configs, log start offsets).
const KafkaAttributePrefix = "kafka."

// UpdateKafkaTopic is UpdateTopic for the Kafka door: a new topic's name
// follows ValidateKafkaTopic, and tc's attributes replace the old ones.
func (b *Broker) UpdateKafkaTopic(tc TopicConfig) error {
	if _, exists := b.topics.get(tc.TopicName); !exists {
		if err := ValidateKafkaTopic(tc.TopicName); err != nil {
			return err
		}
	}
	return b.updateTopic(tc)
}

func (b *Broker) updateTopic(tc TopicConfig) error {
	topic := tc.TopicName
	if isSystemTopic(topic) {
		return Errorf(ErrInvalidArgument, "the topic[%s] is conflict with system topic", topic)
	}
	for _, n := range []int32{tc.ReadQueueNums, tc.WriteQueueNums} {
		if n < 1 || n > b.cfg.MaxQueueNums {
			return Errorf(ErrInvalidArgument, "queue nums %d out of [1,%d]", n, b.cfg.MaxQueueNums)
		}
	}
	if tc.Perm&^(PermRW|PermInherit) != 0 {
		return Errorf(ErrInvalidArgument, "perm %d invalid", tc.Perm)
	}
	if err := b.topics.put(topic, tc); err != nil {
		return err
	}
	b.log.Info("topic updated", "topic", topic, "read", tc.ReadQueueNums, "write", tc.WriteQueueNums, "perm", tc.Perm)
	b.announce()
	return nil
}

// TopicTable returns every topic configuration and the table's version.
func (b *Broker) TopicTable() (map[string]TopicConfig, DataVersion) { return b.topics.all() }
