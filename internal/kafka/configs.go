package kafka

// Topic and broker configs: DescribeConfigs answers the configs clients and
// admin tools ask for with what Keel does; AlterConfigs and
// IncrementalAlterConfigs, and CreateTopics' configs, may set what Keel
// can honour per topic:
//
//	max.message.bytes  per topic (1 B .. the broker's maxMessageSize, which
//	                   the store enforces for every record), kept in
//	                   the topic's attributes (topics.json) and checked by
//	                   Produce instead of the broker's maxMessageSize
//	everything else    read-only: setting it to its current value is
//	                   accepted (a no-op), another value is refused with
//	                   INVALID_CONFIG naming the broker setting it follows
//	                   (retention is the broker's fileReservedTime on the
//	                   shared CommitLog; cleanup.policy=compact is not
//	                   offered)
//
// Unknown names are refused with INVALID_CONFIG, as Kafka does. Broker
// resources (type 4, name "0" or "") are described, never altered.

import (
	"sort"
	"strconv"

	"github.com/keelmq/keel/internal/core"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	resourceTopic  kmsg.ConfigResourceType = 2
	resourceBroker kmsg.ConfigResourceType = 4

	// attrMaxMessageBytes is the topic attribute max.message.bytes is
	// kept in.
	attrMaxMessageBytes = core.KafkaAttributePrefix + "max.message.bytes"
)

// topicConfig is one config of the table: its value for a topic, whether
// it may be set, and where its value comes from.
type topicConfig struct {
	typ      kmsg.ConfigType
	value    func(s *Server, tc core.TopicConfig) string
	settable bool   // stored per topic
	from     string // the Keel setting a read-only one follows
	doc      string
}

func constant(v string) func(*Server, core.TopicConfig) string {
	return func(*Server, core.TopicConfig) string { return v }
}

var topicConfigs = map[string]topicConfig{
	"cleanup.policy": {typ: kmsg.ConfigTypeList, value: constant("delete"), from: "Keel deletes by age only (no compaction)",
		doc: "delete: segments are removed by age, broker-wide"},
	"retention.ms": {typ: kmsg.ConfigTypeLong, value: func(s *Server, _ core.TopicConfig) string { return itoa(s.cfg.RetentionMs) },
		from: "the broker's fileReservedTime", doc: "the broker's fileReservedTime (the CommitLog is shared by all topics)"},
	"retention.bytes": {typ: kmsg.ConfigTypeLong, value: constant("-1"), from: "the broker's disk watermarks",
		doc: "no per-topic size limit; the broker's disk watermarks apply"},
	"max.message.bytes": {typ: kmsg.ConfigTypeInt, settable: true, doc: "the largest record batch a producer may send to this topic",
		value: func(s *Server, tc core.TopicConfig) string { return strconv.Itoa(s.maxBatchBytes(tc)) }},
	"segment.bytes": {typ: kmsg.ConfigTypeInt, value: func(s *Server, _ core.TopicConfig) string { return itoa(s.cfg.SegmentBytes) },
		from: "the broker's mapedFileSizeCommitLog", doc: "the CommitLog's segment size (shared by all topics)"},
	"min.insync.replicas": {typ: kmsg.ConfigTypeInt, value: constant("1"), from: "the broker's replication settings",
		doc: "acks=all waits for the broker's flush and replication policy"},
	"compression.type": {typ: kmsg.ConfigTypeString, value: constant("producer"), from: "the producer's compression (batches are stored as produced)",
		doc: "batches are stored as the producer compressed them"},
	"message.timestamp.type": {typ: kmsg.ConfigTypeString, value: constant("CreateTime"), from: "the producer's timestamps (batches are stored as produced)",
		doc: "record timestamps are the producer's"},
	"unclean.leader.election.enable": {typ: kmsg.ConfigTypeBoolean, value: constant("false"), from: "a single leader per partition",
		doc: "not applicable"},
	"message.downconversion.enable": {typ: kmsg.ConfigTypeBoolean, value: constant("false"), from: "no down-conversion",
		doc: "message formats 0 and 1 are not served"},
}

// maxBatchBytes is the batch size limit of a topic.
func (s *Server) maxBatchBytes(tc core.TopicConfig) int {
	if v, ok := tc.Attributes[attrMaxMessageBytes]; ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return s.cfg.MaxBatchBytes
}

// applyTopicConfig checks that name=value may be set on tc and, for a
// settable config, sets it in attrs. It returns INVALID_CONFIG and why
// when it may not.
func (s *Server) applyTopicConfig(tc core.TopicConfig, attrs map[string]string, name string, value *string) (int16, string) {
	c, ok := topicConfigs[name]
	if !ok {
		return errInvalidConfig, "unknown topic config " + name
	}
	if !c.settable {
		if value == nil || *value == c.value(s, tc) {
			return errNone, "" // its only value: nothing to change
		}
		return errInvalidConfig, name + " cannot be set per topic on this broker: it follows " + c.from + " (" + c.value(s, tc) + ")"
	}
	if value == nil { // back to the default
		delete(attrs, attrMaxMessageBytes)
		return errNone, ""
	}
	n, err := strconv.Atoi(*value)
	if err != nil || n < 1 || n > s.cfg.MaxBatchBytes {
		return errInvalidConfig, "max.message.bytes must be between 1 and " + strconv.Itoa(s.cfg.MaxBatchBytes) + " (the broker's maxMessageSize)"
	}
	attrs[attrMaxMessageBytes] = strconv.Itoa(n)
	return errNone, ""
}

// brokerConfigs are the broker's own settings under Kafka's names.
func (s *Server) brokerConfigs() map[string]string {
	return map[string]string{
		"broker.id":                    "0",
		"log.retention.ms":             itoa(s.cfg.RetentionMs),
		"log.retention.bytes":          "-1",
		"log.segment.bytes":            itoa(s.cfg.SegmentBytes),
		"log.cleanup.policy":           "delete",
		"message.max.bytes":            strconv.Itoa(s.cfg.MaxBatchBytes),
		"socket.request.max.bytes":     strconv.Itoa(s.cfg.MaxRequestBytes),
		"num.partitions":               strconv.Itoa(int(s.core.DefaultQueueNums())),
		"default.replication.factor":   "1",
		"min.insync.replicas":          "1",
		"auto.create.topics.enable":    strconv.FormatBool(s.autoCreateEnabled()),
		"compression.type":             "producer",
		"log.message.timestamp.type":   "CreateTime",
		"group.min.session.timeout.ms": strconv.FormatInt(minSessionTimeout.Milliseconds(), 10),
		"group.max.session.timeout.ms": strconv.FormatInt(maxSessionTimeout.Milliseconds(), 10),
		"producer.id.expiration.ms":    strconv.FormatInt(s.cfg.ProducerIDExpiration.Milliseconds(), 10),
		"connections.max.idle.ms":      strconv.FormatInt(s.cfg.IdleTimeout.Milliseconds(), 10),
	}
}

// autoCreateEnabled reports whether unknown topics are created (the core
// keeps the template topic only when autoCreateTopicEnable is on).
func (s *Server) autoCreateEnabled() bool {
	_, ok := s.core.Topic(core.DefaultTopic)
	return ok
}

func (s *Server) describeConfigs(req *kmsg.DescribeConfigsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, r := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		want := func(name string) bool {
			if r.ConfigNames == nil {
				return true
			}
			for _, n := range r.ConfigNames {
				if n == name {
					return true
				}
			}
			return false
		}
		add := func(name, value string, readOnly, isDefault bool, src kmsg.ConfigSource, typ kmsg.ConfigType, doc string) {
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name, c.Value, c.ReadOnly, c.IsDefault, c.Source, c.ConfigType = name, kmsg.StringPtr(value), readOnly, isDefault, src, typ
			if req.IncludeDocumentation && doc != "" {
				c.Documentation = kmsg.StringPtr(doc)
			}
			if req.IncludeSynonyms {
				syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
				syn.Name, syn.Value, syn.Source = name, kmsg.StringPtr(value), src
				c.ConfigSynonyms = append(c.ConfigSynonyms, syn)
			}
			rr.Configs = append(rr.Configs, c)
		}
		switch r.ResourceType {
		case resourceTopic:
			tc, ok := s.core.Topic(r.ResourceName)
			if !ok {
				rr.ErrorCode, rr.ErrorMessage = errUnknownTopicOrPartition, kmsg.StringPtr("topic "+r.ResourceName+" does not exist")
				break
			}
			for _, name := range sortedKeys(topicConfigs) {
				if !want(name) {
					continue
				}
				c := topicConfigs[name]
				src, isDefault := kmsg.ConfigSourceStaticBrokerConfig, true
				if c.settable {
					src = kmsg.ConfigSourceDefaultConfig
					if _, set := tc.Attributes[attrMaxMessageBytes]; set {
						src, isDefault = kmsg.ConfigSourceDynamicTopicConfig, false
					}
				}
				add(name, c.value(s, tc), !c.settable, isDefault, src, c.typ, c.doc)
			}
		case resourceBroker:
			if r.ResourceName != "" && r.ResourceName != "0" {
				rr.ErrorCode, rr.ErrorMessage = errInvalidRequest, kmsg.StringPtr("this broker is node 0")
				break
			}
			cfgs := s.brokerConfigs()
			for _, name := range sortedKeys(cfgs) {
				if want(name) {
					add(name, cfgs[name], true, false, kmsg.ConfigSourceStaticBrokerConfig, kmsg.ConfigTypeString, "")
				}
			}
		default:
			rr.ErrorCode, rr.ErrorMessage = errInvalidRequest, kmsg.StringPtr("only topic and broker configs are described")
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// alterTopic applies set (name -> value, nil: back to the default) to
// topic; replace says every settable config not in set goes back to its
// default (AlterConfigs), else the others are kept (incremental).
func (s *Server) alterTopic(topic string, set map[string]*string, replace, validateOnly bool) (int16, string) {
	tc, ok := s.core.Topic(topic)
	if !ok {
		return errUnknownTopicOrPartition, "topic " + topic + " does not exist"
	}
	attrs := make(map[string]string, len(tc.Attributes)+1)
	for k, v := range tc.Attributes {
		attrs[k] = v
	}
	if replace {
		delete(attrs, attrMaxMessageBytes)
	}
	for _, name := range sortedKeys(set) {
		if code, msg := s.applyTopicConfig(tc, attrs, name, set[name]); code != errNone {
			return code, msg
		}
	}
	if validateOnly || attrs[attrMaxMessageBytes] == tc.Attributes[attrMaxMessageBytes] {
		return errNone, ""
	}
	tc.Attributes = attrs
	if err := s.putTopic(tc); err != nil {
		return coreCode(err), err.Error()
	}
	return errNone, ""
}

func (s *Server) alterConfigs(req *kmsg.AlterConfigsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	for _, r := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		var code int16
		var msg string
		switch r.ResourceType {
		case resourceTopic:
			set := map[string]*string{}
			for _, c := range r.Configs {
				set[c.Name] = c.Value
			}
			code, msg = s.alterTopic(r.ResourceName, set, true, req.ValidateOnly)
		case resourceBroker:
			code, msg = errInvalidConfig, "broker configs are set in broker.conf, not through Kafka"
		default:
			code, msg = errInvalidRequest, "only topic configs may be altered"
		}
		rr.ErrorCode = code
		if msg != "" {
			rr.ErrorMessage = kmsg.StringPtr(msg)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

func (s *Server) incrementalAlterConfigs(req *kmsg.IncrementalAlterConfigsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, r := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		var code int16
		var msg string
		switch r.ResourceType {
		case resourceTopic:
			set := map[string]*string{}
			for _, c := range r.Configs {
				switch c.Op {
				case kmsg.IncrementalAlterConfigOpSet:
					set[c.Name] = c.Value
				case kmsg.IncrementalAlterConfigOpDelete:
					set[c.Name] = nil
				default: // append, subtract: list configs only, and Keel's lists are fixed
					code, msg = errInvalidConfig, "only SET and DELETE are supported ("+c.Name+")"
				}
			}
			if code == errNone {
				code, msg = s.alterTopic(r.ResourceName, set, false, req.ValidateOnly)
			}
		case resourceBroker:
			code, msg = errInvalidConfig, "broker configs are set in broker.conf, not through Kafka"
		default:
			code, msg = errInvalidRequest, "only topic configs may be altered"
		}
		rr.ErrorCode = code
		if msg != "" {
			rr.ErrorMessage = kmsg.StringPtr(msg)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

// putTopic stores a changed configuration of an existing topic, its
// attributes as given.
func (s *Server) putTopic(tc core.TopicConfig) error { return s.core.UpdateKafkaTopic(tc) }
