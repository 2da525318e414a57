package kafka

// Topic and broker configs. Every topic config Kafka defines may be given
// at CreateTopics and set by AlterConfigs and IncrementalAlterConfigs
// (SET, DELETE; APPEND and SUBTRACT for the list configs); a value set is
// kept in the topic's attributes (topics.json) as kafka.<name>, written
// durably before the answer. What Keel does with each is the doc of its
// row of topicConfigs (docs/kafka.md has the table):
//
//	honoured     retention.ms, retention.bytes (retention.go),
//	             max.message.bytes (Produce), message.timestamp.type
//	             (LogAppendTime stamped at append, produce.go),
//	             cleanup.policy (delete, compact, compact,delete;
//	             compact.go), delete.retention.ms, min.compaction.lag.ms,
//	             max.compaction.lag.ms, min.cleanable.dirty.ratio (the
//	             cleaner), compression.type (recompressed
//	             at produce, produce.go), message.timestamp.*.max.ms
//	             (checked at produce)
//	accepted     kept and described, no effect, each for the reason its
//	             doc gives (segment.*, compaction settings while the policy
//	             is delete, flush.* under SYNC_FLUSH, replication
//	             throttles, tiered storage off, ...)
//	refused      INVALID_CONFIG naming the key and why, where honouring
//	             is impossible and accepting would mislead:
//	             cleanup.policy=compact without a data directory,
//	             min.insync.replicas above 1,
//	             remote.storage.enable=true, flush.* under ASYNC_FLUSH
//	             other than Kafka's default
//
// A value is checked for its type and range as Kafka checks it. Unknown
// names are INVALID_CONFIG, as Kafka. DescribeConfigs reports each
// topic config's value and source: DYNAMIC_TOPIC_CONFIG when set on the
// topic, else that of the broker config it falls back to:
// STATIC_BROKER_CONFIG for what follows broker.conf (fileReservedTime,
// maxMessageSize, mapedFileSizeCommitLog), DEFAULT_CONFIG for Kafka's
// defaults; synonyms, when asked, list the topic's value and the
// broker's. Broker resources (type 4, name "0" or "") are described,
// never altered.

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/core"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	resourceTopic  kmsg.ConfigResourceType = 2
	resourceBroker kmsg.ConfigResourceType = 4

	// attrMaxMessageBytes is the topic attribute max.message.bytes is
	// kept in (every config is kept as configAttr(name)).
	attrMaxMessageBytes = core.KafkaAttributePrefix + "max.message.bytes"

	maxLong = "9223372036854775807"
)

// configAttr is the topic attribute a topic config set on it is kept in.
func configAttr(name string) string { return core.KafkaAttributePrefix + name }

// topicConfig is one topic config Kafka defines: its type, the broker
// config it falls back to and that one's value and source, how a value
// is checked, and what Keel does with it.
type topicConfig struct {
	typ    kmsg.ConfigType
	broker string                  // the broker config it falls back to ("": none)
	def    func(s *Server) string  // the value when not set on the topic
	static bool                    // the default follows broker.conf (STATIC_BROKER_CONFIG), else Kafka's default
	lo, hi func(s *Server) float64 // numeric range (nil: the type's)
	// check refuses a well-typed value Keel cannot honour: why, "" if it
	// may be set.
	check func(s *Server, v string) string
	doc   string
}

func constant(v string) func(*Server) string { return func(*Server) string { return v } }
func num(v float64) func(*Server) float64    { return func(*Server) float64 { return v } }

// only refuses every value but the given ones, saying why.
func only(why string, ok ...string) func(*Server, string) string {
	return func(_ *Server, v string) string {
		for _, o := range ok {
			if strings.EqualFold(v, o) {
				return ""
			}
		}
		return why
	}
}

// noEffect is the doc of a config that is kept and has no effect.
func noEffect(why string) string { return "accepted and kept; no effect: " + why }

var topicConfigs = map[string]topicConfig{
	"retention.ms": {typ: kmsg.ConfigTypeLong, broker: "log.retention.ms", static: true, lo: num(-1),
		def: func(s *Server) string { return itoa(s.cfg.RetentionMs) },
		doc: "honoured: a partition's log start moves past batches whose max timestamp is older than this (-1: never); a value above the broker's fileReservedTime keeps the CommitLog's segments from age retention, not from disk pressure"},
	"retention.bytes": {typ: kmsg.ConfigTypeLong, broker: "log.retention.bytes", def: constant("-1"), lo: num(-1),
		doc: "honoured: a partition's log start moves past its oldest batches while it holds more than this many bytes without them (-1: no limit)"},
	"max.message.bytes": {typ: kmsg.ConfigTypeInt, broker: "message.max.bytes", static: true, lo: num(0),
		hi:  func(s *Server) float64 { return float64(s.maxTopicBatchBytes()) },
		def: func(s *Server) string { return strconv.Itoa(s.cfg.MaxBatchBytes) },
		doc: "honoured: the largest record batch a producer may send to this topic, up to what the store takes in one record and a request frame carries"},
	"message.timestamp.type": {typ: kmsg.ConfigTypeString, broker: "log.message.timestamp.type", def: constant("CreateTime"),
		check: only("message.timestamp.type must be CreateTime or LogAppendTime", "CreateTime", "LogAppendTime"),
		doc:   "honoured: LogAppendTime stamps each batch with its store time at append (the batch's LogAppendTime attribute and maxTimestamp, the CRC recomputed)"},
	"cleanup.policy": {typ: kmsg.ConfigTypeList, broker: "log.cleanup.policy", def: constant("delete"),
		check: policyCheck,
		doc:   "honoured: delete, records go by retention; compact, the latest record of each key is kept (a copy per partition, docs/kafka.md \"Compaction\"); compact,delete, both"},
	"compression.type": {typ: kmsg.ConfigTypeString, broker: "compression.type", def: constant("producer"),
		check: compressionCheck,
		doc:   "honoured: producer stores batches as the producer compressed them; uncompressed, gzip, snappy, lz4 or zstd recompresses every batch in another codec to it as it is produced"},
	"min.insync.replicas": {typ: kmsg.ConfigTypeInt, broker: "min.insync.replicas", def: constant("1"), lo: num(1),
		check: only("min.insync.replicas above 1 cannot be honoured per topic: acks=all waits for the broker's flush and replication policy (flushDiskType, the broker group's minInSyncReplicas)", "1"),
		doc:   "1: acks=all waits for the broker's flush and replication policy"},
	"message.timestamp.difference.max.ms": {typ: kmsg.ConfigTypeLong, broker: "log.message.timestamp.difference.max.ms", def: constant(maxLong), lo: num(0),
		doc: timestampDoc},
	"message.timestamp.before.max.ms": {typ: kmsg.ConfigTypeLong, broker: "log.message.timestamp.before.max.ms", def: constant(maxLong), lo: num(0),
		doc: timestampDoc},
	"message.timestamp.after.max.ms": {typ: kmsg.ConfigTypeLong, broker: "log.message.timestamp.after.max.ms", def: constant(maxLong), lo: num(0),
		doc: timestampDoc},
	"remote.storage.enable": {typ: kmsg.ConfigTypeBoolean, def: constant("false"),
		check: only("remote.storage.enable=true cannot be honoured: this broker has no tiered storage", "false"),
		doc:   "false: no tiered storage"},
	"flush.messages": {typ: kmsg.ConfigTypeLong, broker: "log.flush.interval.messages", def: constant(maxLong), lo: num(1),
		check: flushCheck, doc: noEffect("under SYNC_FLUSH every batch is flushed as it is appended (group commit), which satisfies any value; under ASYNC_FLUSH only the default is accepted")},
	"flush.ms": {typ: kmsg.ConfigTypeLong, broker: "log.flush.interval.ms", def: constant(maxLong), lo: num(0),
		check: flushCheck, doc: noEffect("under SYNC_FLUSH every batch is flushed as it is appended (group commit), which satisfies any value; under ASYNC_FLUSH only the default is accepted")},
	"segment.bytes": {typ: kmsg.ConfigTypeInt, broker: "log.segment.bytes", static: true, lo: num(14),
		def: func(s *Server) string { return itoa(s.cfg.SegmentBytes) },
		doc: noEffect("the CommitLog's segments (mapedFileSizeCommitLog) are shared by all topics; retention moves a partition's log start batch by batch, whatever the segment size")},
	"segment.ms": {typ: kmsg.ConfigTypeLong, broker: "log.roll.ms", def: constant("604800000"), lo: num(1),
		doc: noEffect("the CommitLog's segments are shared by all topics and roll when full; retention works batch by batch, and the cleaner of a compacted topic cleans every durable batch older than min.compaction.lag.ms (there is no active segment it leaves alone)")},
	"segment.jitter.ms": {typ: kmsg.ConfigTypeLong, broker: "log.roll.jitter.ms", def: constant("0"), lo: num(0),
		doc: noEffect("segments are shared by all topics")},
	"segment.index.bytes": {typ: kmsg.ConfigTypeInt, broker: "log.index.size.max.bytes", def: constant("10485760"), lo: num(4),
		doc: noEffect("every record has a ConsumeQueue entry; there is no sparse offset index to size")},
	"index.interval.bytes": {typ: kmsg.ConfigTypeInt, broker: "log.index.interval.bytes", def: constant("4096"), lo: num(0),
		doc: noEffect("every record has a ConsumeQueue entry; there is no sparse offset index")},
	"file.delete.delay.ms": {typ: kmsg.ConfigTypeLong, broker: "log.segment.delete.delay.ms", def: constant("60000"), lo: num(0),
		doc: noEffect("segments are shared by all topics and deleted by the broker's retention")},
	"preallocate": {typ: kmsg.ConfigTypeBoolean, broker: "log.preallocate", def: constant("false"),
		doc: noEffect("segments are shared by all topics (the broker's settings create them)")},
	"delete.retention.ms": {typ: kmsg.ConfigTypeLong, broker: "log.cleaner.delete.retention.ms", def: constant("86400000"), lo: num(0),
		doc: "honoured on compacted topics: a tombstone (null value) is removed by the first cleaning at least this long after the cleaning that first kept it; no effect with cleanup.policy=delete"},
	"min.compaction.lag.ms": {typ: kmsg.ConfigTypeLong, broker: "log.cleaner.min.compaction.lag.ms", def: constant("0"), lo: num(0),
		doc: "honoured on compacted topics: a batch younger than this (its max timestamp, else its store time) and every later one stay uncleaned"},
	"max.compaction.lag.ms": {typ: kmsg.ConfigTypeLong, broker: "log.cleaner.max.compaction.lag.ms", def: constant(maxLong), lo: num(1),
		doc: "honoured on compacted topics: a partition whose oldest uncleaned batch is older than this is cleaned at the next cleaner round whatever its dirty ratio"},
	"min.cleanable.dirty.ratio": {typ: kmsg.ConfigTypeDouble, broker: "log.cleaner.min.cleanable.ratio", def: constant("0.5"), lo: num(0), hi: num(1),
		doc: "honoured on compacted topics: a partition is cleaned when its uncleaned bytes are at least this share of its compacted copy and uncleaned bytes together (or a tombstone's time has come, or max.compaction.lag.ms passed)"},
	"message.format.version": {typ: kmsg.ConfigTypeString, broker: "log.message.format.version", def: constant("3.0-IV1"),
		doc: noEffect("batches are stored in format v2 (magic 2), as Kafka 3 ignores it")},
	"message.downconversion.enable": {typ: kmsg.ConfigTypeBoolean, broker: "log.message.downconversion.enable", def: constant("false"),
		doc: noEffect("Fetch v0-3, which down-conversion serves, are not served")},
	"unclean.leader.election.enable": {typ: kmsg.ConfigTypeBoolean, broker: "unclean.leader.election.enable", def: constant("false"),
		doc: noEffect("each partition has one leader, the broker; failover is the broker group's (docs/replication.md)")},
	"leader.replication.throttled.replicas": {typ: kmsg.ConfigTypeList, def: constant(""),
		doc: noEffect("partitions are not replicated by Kafka's protocol")},
	"follower.replication.throttled.replicas": {typ: kmsg.ConfigTypeList, def: constant(""),
		doc: noEffect("partitions are not replicated by Kafka's protocol")},
	"local.retention.ms": {typ: kmsg.ConfigTypeLong, broker: "log.local.retention.ms", def: constant("-2"), lo: num(-2),
		doc: noEffect("no tiered storage: all of a partition is local (retention.ms applies)")},
	"local.retention.bytes": {typ: kmsg.ConfigTypeLong, broker: "log.local.retention.bytes", def: constant("-2"), lo: num(-2),
		doc: noEffect("no tiered storage: all of a partition is local (retention.bytes applies)")},
	"remote.log.copy.disable": {typ: kmsg.ConfigTypeBoolean, def: constant("false"),
		doc: noEffect("no tiered storage")},
	"remote.log.delete.on.disable": {typ: kmsg.ConfigTypeBoolean, def: constant("false"),
		doc: noEffect("no tiered storage")},
	"compression.gzip.level": {typ: kmsg.ConfigTypeInt, broker: "compression.gzip.level", def: constant("-1"), lo: num(-1), hi: num(9),
		doc: noEffect("the broker recompresses at the codecs' default levels")},
	"compression.lz4.level": {typ: kmsg.ConfigTypeInt, broker: "compression.lz4.level", def: constant("9"), lo: num(1), hi: num(17),
		doc: noEffect("the broker recompresses at the codecs' default levels")},
	"compression.zstd.level": {typ: kmsg.ConfigTypeInt, broker: "compression.zstd.level", def: constant("3"), lo: num(-131072), hi: num(22),
		doc: noEffect("the broker recompresses at the codecs' default levels")},
}

// policyCheck takes delete, compact, or both (a list, in any order);
// compaction needs the door's data directory for its copies.
func policyCheck(s *Server, v string) string {
	seen := map[string]bool{}
	for _, p := range strings.Split(v, ",") {
		p = strings.ToLower(strings.TrimSpace(p))
		if p != "delete" && p != "compact" || seen[p] {
			return "cleanup.policy must be delete, compact or compact,delete"
		}
		seen[p] = true
	}
	if seen["compact"] && s.compact == nil {
		return "cleanup.policy=compact needs the broker's data directory for the compacted copies, and this door has none"
	}
	return ""
}

func compressionCheck(_ *Server, v string) string {
	switch v {
	case "producer", "uncompressed", "gzip", "snappy", "lz4", "zstd":
		return ""
	}
	return "compression.type must be one of producer, uncompressed, gzip, snappy, lz4, zstd"
}

const timestampDoc = "honoured on CreateTime topics: Produce refuses a batch with a record whose timestamp is further before (before.max.ms) or after (after.max.ms) the broker's clock, or either way (difference.max.ms), with INVALID_TIMESTAMP"

func flushCheck(s *Server, v string) string {
	if v == maxLong || s.st.SyncFlush() {
		return ""
	}
	return "the broker flushes by its flushDiskType=ASYNC_FLUSH interval, not per topic: only Kafka's default (" + maxLong + ") is accepted (SYNC_FLUSH flushes every batch)"
}

// maxTopicBatchBytes is the largest max.message.bytes a topic may have:
// what the store takes in one record (its body limit, within half a
// CommitLog segment, less the envelope) and what a request frame carries.
func (s *Server) maxTopicBatchBytes() int {
	const envelope = 512 // the Kafka-batch envelope with a topic name of at most 255 bytes, with room to spare
	return max(s.cfg.MaxBatchBytes, min(s.st.MaxRecordBodyBytes(), int(s.cfg.SegmentBytes/2)-envelope, s.cfg.MaxRequestBytes-envelope))
}

// maxBatchBytes is the batch size limit of a topic.
func (s *Server) maxBatchBytes(tc core.TopicConfig) int {
	if v, ok := tc.Attributes[attrMaxMessageBytes]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return n
		}
	}
	return s.cfg.MaxBatchBytes
}

// topicValue is the value of a topic config on tc: set on the topic
// (set true), else its default.
func (s *Server) topicValue(tc core.TopicConfig, name string) (v string, set bool) {
	if v, ok := tc.Attributes[configAttr(name)]; ok {
		return v, true
	}
	return topicConfigs[name].def(s), false
}

// topicLong is a long topic config's value on tc.
func (s *Server) topicLong(tc core.TopicConfig, name string) (int64, bool) {
	v, set := s.topicValue(tc, name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, set
}

// checkValue checks value for config c as Kafka does (type, range) and
// then whether Keel can honour it; it returns the value as kept, or why
// not.
func (s *Server) checkValue(name string, c topicConfig, value string) (string, string) {
	bad := func(what string) (string, string) {
		return "", "invalid value " + strconv.Quote(value) + " for " + name + ": " + what
	}
	lo, hi := math.Inf(-1), math.Inf(1)
	switch c.typ {
	case kmsg.ConfigTypeInt:
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 32)
		if err != nil {
			return bad("not an int")
		}
		value, lo, hi = strconv.FormatInt(n, 10), math.MinInt32, math.MaxInt32
	case kmsg.ConfigTypeLong:
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return bad("not a long")
		}
		value = strconv.FormatInt(n, 10)
	case kmsg.ConfigTypeDouble:
		if _, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err != nil {
			return bad("not a double")
		}
		value = strings.TrimSpace(value)
	case kmsg.ConfigTypeBoolean:
		switch v := strings.ToLower(strings.TrimSpace(value)); v {
		case "true", "false":
			value = v
		default:
			return bad("not true or false")
		}
	case kmsg.ConfigTypeList:
		var items []string
		for _, it := range strings.Split(value, ",") {
			if it = strings.TrimSpace(it); it != "" {
				items = append(items, it)
			}
		}
		value = strings.Join(items, ",")
	default:
		value = strings.TrimSpace(value)
	}
	if c.lo != nil {
		lo = max(lo, c.lo(s))
	}
	if c.hi != nil {
		hi = min(hi, c.hi(s))
	}
	if c.typ == kmsg.ConfigTypeInt || c.typ == kmsg.ConfigTypeLong || c.typ == kmsg.ConfigTypeDouble {
		f, _ := strconv.ParseFloat(value, 64)
		if f < lo || f > hi {
			switch {
			case name == "max.message.bytes":
				return bad("the most this broker takes is " + strconv.FormatFloat(hi, 'f', -1, 64) + " (what the store takes in one record and a request frame, maxFrameBytes, carries)")
			case math.IsInf(hi, 1) || c.hi == nil:
				return bad("at least " + strconv.FormatFloat(lo, 'f', -1, 64))
			}
			return bad("between " + strconv.FormatFloat(lo, 'f', -1, 64) + " and " + strconv.FormatFloat(hi, 'f', -1, 64))
		}
	}
	if c.check != nil {
		if why := c.check(s, value); why != "" {
			return "", why
		}
	}
	return value, ""
}

// applyTopicConfig checks that name=value may be set on a topic and sets
// it in attrs (nil value: back to the default). It returns
// INVALID_CONFIG and why when it may not.
func (s *Server) applyTopicConfig(attrs map[string]string, name string, value *string) (int16, string) {
	c, ok := topicConfigs[name]
	if !ok {
		return errInvalidConfig, "unknown topic config " + name
	}
	if value == nil {
		delete(attrs, configAttr(name))
		return errNone, ""
	}
	v, why := s.checkValue(name, c, *value)
	if why != "" {
		if !strings.Contains(why, name) {
			why = name + "=" + *value + ": " + why
		}
		return errInvalidConfig, why
	}
	attrs[configAttr(name)] = v
	return errNone, ""
}

// brokerExtras are broker settings under Kafka's names that no topic
// config falls back to.
func (s *Server) brokerExtras() map[string]string {
	return map[string]string{
		"broker.id":                       "0",
		"socket.request.max.bytes":        strconv.Itoa(s.cfg.MaxRequestBytes),
		"num.partitions":                  strconv.Itoa(int(s.core.DefaultQueueNums())),
		"default.replication.factor":      "1",
		"auto.create.topics.enable":       strconv.FormatBool(s.autoCreateEnabled()),
		"log.retention.check.interval.ms": itoa(s.cfg.RetentionCheckInterval.Milliseconds()),
		"group.min.session.timeout.ms":    strconv.FormatInt(minSessionTimeout.Milliseconds(), 10),
		"group.max.session.timeout.ms":    strconv.FormatInt(maxSessionTimeout.Milliseconds(), 10),
		"producer.id.expiration.ms":       strconv.FormatInt(s.cfg.ProducerIDExpiration.Milliseconds(), 10),
		"connections.max.idle.ms":         strconv.FormatInt(s.cfg.IdleTimeout.Milliseconds(), 10),
	}
}

// brokerConfig is one broker config as described.
type brokerConfig struct {
	value string
	src   kmsg.ConfigSource
	typ   kmsg.ConfigType
}

// brokerConfigs are the broker's own settings under Kafka's names: the
// configs topic configs fall back to, and the extras.
func (s *Server) brokerConfigs() map[string]brokerConfig {
	out := map[string]brokerConfig{}
	for name, v := range s.brokerExtras() {
		src := kmsg.ConfigSourceStaticBrokerConfig
		if name == "broker.id" || name == "default.replication.factor" {
			src = kmsg.ConfigSourceDefaultConfig
		}
		out[name] = brokerConfig{v, src, kmsg.ConfigTypeString}
	}
	for _, c := range topicConfigs {
		if c.broker != "" {
			out[c.broker] = brokerConfig{c.def(s), c.source(), c.typ}
		}
	}
	return out
}

// source is where a topic config's default comes from.
func (c topicConfig) source() kmsg.ConfigSource {
	if c.static {
		return kmsg.ConfigSourceStaticBrokerConfig
	}
	return kmsg.ConfigSourceDefaultConfig
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
		type synonym struct {
			name, value string
			src         kmsg.ConfigSource
		}
		add := func(name, value string, readOnly bool, src kmsg.ConfigSource, typ kmsg.ConfigType, doc string, syns []synonym) {
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name, c.Value, c.ReadOnly, c.Source, c.ConfigType = name, kmsg.StringPtr(value), readOnly, src, typ
			c.IsDefault = src == kmsg.ConfigSourceDefaultConfig
			if req.IncludeDocumentation && doc != "" {
				c.Documentation = kmsg.StringPtr(doc)
			}
			if req.IncludeSynonyms {
				for _, sy := range syns {
					cs := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
					cs.Name, cs.Value, cs.Source = sy.name, kmsg.StringPtr(sy.value), sy.src
					c.ConfigSynonyms = append(c.ConfigSynonyms, cs)
				}
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
				v, set := s.topicValue(tc, name)
				src := c.source()
				var syns []synonym
				if set {
					src = kmsg.ConfigSourceDynamicTopicConfig
					syns = append(syns, synonym{name, v, src})
				}
				if c.broker != "" {
					syns = append(syns, synonym{c.broker, c.def(s), c.source()})
				}
				add(name, v, false, src, c.typ, c.doc, syns)
			}
		case resourceBroker:
			if r.ResourceName != "" && r.ResourceName != "0" {
				rr.ErrorCode, rr.ErrorMessage = errInvalidRequest, kmsg.StringPtr("this broker is node 0")
				break
			}
			cfgs := s.brokerConfigs()
			for _, name := range sortedKeys(cfgs) {
				if want(name) {
					b := cfgs[name]
					add(name, b.value, true, b.src, b.typ, "", []synonym{{name, b.value, b.src}})
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

// configOp is one change of a topic config: set to value, or (del) back
// to its default, or (incremental list ops) value appended to or
// subtracted from its list.
type configOp struct {
	value    *string
	append   bool
	subtract bool
}

// alterTopic applies ops (by config name) to topic; replace says every
// config not in ops goes back to its default (AlterConfigs), else the
// others are kept (incremental).
func (s *Server) alterTopic(topic string, ops map[string]configOp, replace, validateOnly bool) (int16, string) {
	s.topicMu.Lock()
	defer s.topicMu.Unlock()
	tc, ok := s.core.Topic(topic)
	if !ok {
		return errUnknownTopicOrPartition, "topic " + topic + " does not exist"
	}
	attrs := make(map[string]string, len(tc.Attributes)+len(ops))
	for k, v := range tc.Attributes {
		attrs[k] = v
	}
	if replace {
		for name := range topicConfigs {
			delete(attrs, configAttr(name))
		}
	}
	for _, name := range sortedKeys(ops) {
		op := ops[name]
		if (op.append || op.subtract) && op.value != nil {
			c, ok := topicConfigs[name]
			if !ok || c.typ != kmsg.ConfigTypeList {
				return errInvalidConfig, "APPEND and SUBTRACT apply to list configs only (" + name + ")"
			}
			cur, _ := s.topicValue(core.TopicConfig{Attributes: attrs}, name)
			op.value = kmsg.StringPtr(editList(cur, *op.value, op.subtract))
		}
		if code, msg := s.applyTopicConfig(attrs, name, op.value); code != errNone {
			return code, msg
		}
	}
	if validateOnly || sameAttrs(attrs, tc.Attributes) {
		return errNone, ""
	}
	tc.Attributes = attrs
	if err := s.putTopic(tc); err != nil {
		return coreCode(err), err.Error()
	}
	return errNone, ""
}

// editList appends the items of v to the list cur, or subtracts them.
func editList(cur, v string, subtract bool) string {
	var out []string
	has := map[string]bool{}
	for _, it := range strings.Split(cur, ",") {
		if it = strings.TrimSpace(it); it != "" && !has[it] {
			out, has[it] = append(out, it), true
		}
	}
	for _, it := range strings.Split(v, ",") {
		it = strings.TrimSpace(it)
		switch {
		case it == "":
		case subtract && has[it]:
			out = slices.DeleteFunc(out, func(x string) bool { return x == it })
			delete(has, it)
		case !subtract && !has[it]:
			out, has[it] = append(out, it), true
		}
	}
	return strings.Join(out, ",")
}

func sameAttrs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
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
			ops := map[string]configOp{}
			for _, c := range r.Configs {
				ops[c.Name] = configOp{value: c.Value}
			}
			code, msg = s.alterTopic(r.ResourceName, ops, true, req.ValidateOnly)
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
			ops := map[string]configOp{}
			for _, c := range r.Configs {
				switch c.Op {
				case kmsg.IncrementalAlterConfigOpSet:
					ops[c.Name] = configOp{value: c.Value}
				case kmsg.IncrementalAlterConfigOpDelete:
					ops[c.Name] = configOp{}
				case kmsg.IncrementalAlterConfigOpAppend:
					ops[c.Name] = configOp{value: c.Value, append: true}
				case kmsg.IncrementalAlterConfigOpSubtract:
					ops[c.Name] = configOp{value: c.Value, subtract: true}
				default:
					code, msg = errInvalidRequest, "unknown operation "+strconv.Itoa(int(c.Op))+" for "+c.Name
				}
			}
			if code == errNone {
				code, msg = s.alterTopic(r.ResourceName, ops, false, req.ValidateOnly)
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
