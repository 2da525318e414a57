package message

import "strings"

// TopicKind classifies a topic by its name. It is the one definition of
// "a user topic" that the broker's gauges, the metrics, the admin client
// and the console all count by.
type TopicKind string

// Topic kinds.
const (
	// TopicNormal is a topic producers write to: a user topic.
	TopicNormal TopicKind = "normal"
	// TopicRetry is a consumer group's %RETRY%<group> topic.
	TopicRetry TopicKind = "retry"
	// TopicDLQ is a consumer group's %DLQ%<group> dead-letter topic.
	TopicDLQ TopicKind = "dlq"
	// TopicSystem is a topic of the broker itself (TBW102, the schedule
	// and transaction topics, RocketMQ's rmq_sys_ topics, Keel's
	// KEEL_SYS_ topics).
	TopicSystem TopicKind = "system"
)

// TopicKinds lists every kind, in display order.
var TopicKinds = []TopicKind{TopicNormal, TopicRetry, TopicDLQ, TopicSystem}

// Retry and dead-letter topic prefixes.
const (
	RetryTopicPrefix = "%RETRY%"
	DLQTopicPrefix   = "%DLQ%"
)

var systemTopicNames = map[string]bool{
	"TBW102": true, "SCHEDULE_TOPIC_XXXX": true, "SELF_TEST_TOPIC": true, "OFFSET_MOVED_EVENT": true,
	"TRANS_CHECK_MAX_TIME_TOPIC": true, "BenchmarkTest": true, "RMQ_SYS_TRACE_TOPIC": true,
}

// KindOfTopic classifies a topic name.
func KindOfTopic(name string) TopicKind {
	switch {
	case strings.HasPrefix(name, RetryTopicPrefix):
		return TopicRetry
	case strings.HasPrefix(name, DLQTopicPrefix):
		return TopicDLQ
	case systemTopicNames[name], strings.HasPrefix(name, "RMQ_SYS_"), strings.HasPrefix(name, "rmq_sys_"),
		strings.HasPrefix(name, "KEEL_SYS_"):
		return TopicSystem
	}
	return TopicNormal
}
