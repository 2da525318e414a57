package core

import "strings"

// Permission bits of a topic and of the broker (RocketMQ's PermName; they
// are stored in topics.json).
const (
	PermInherit int32 = 0x1 // a template topic: topics created from it inherit its permission
	PermWrite   int32 = 0x2
	PermRead    int32 = 0x4
	PermRW            = PermRead | PermWrite
)

// Topic and group naming.
const (
	// DefaultTopic is the template topic producers name when sending to a topic
	// that does not exist yet (auto-creation).
	DefaultTopic     = "TBW102"
	SelfTestTopic    = "SELF_TEST_TOPIC"
	scheduleTopic    = "SCHEDULE_TOPIC_XXXX"
	transHalfTopic   = "RMQ_SYS_TRANS_HALF_TOPIC"
	transOpHalfTopic = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
	transCheckTopic  = "TRANS_CHECK_MAX_TIME_TOPIC"
	timerTopic       = "rmq_sys_wheel_timer"
	keelTimerTopic   = "KEEL_SYS_TIMER" // internal/broker/schedule's timer cascade
	retryPrefix      = "%RETRY%"
	dlqPrefix        = "%DLQ%"
	sysTopicPrefix   = "rmq_sys_"
)

// systemTopics are never created by clients, never auto-created from
// TBW102 and never shown as ordinary topics.
var systemTopics = map[string]bool{
	DefaultTopic:          true,
	scheduleTopic:         true,
	keelTimerTopic:        true,
	transHalfTopic:        true,
	transOpHalfTopic:      true,
	transCheckTopic:       true,
	"RMQ_SYS_TRACE_TOPIC": true,
	"OFFSET_MOVED_EVENT":  true,
	SelfTestTopic:         true,
}

// notSendableTopics refuse client sends (ErrForbidden): they are written
// only by the broker itself.
var notSendableTopics = map[string]bool{
	scheduleTopic:    true,
	transHalfTopic:   true,
	transOpHalfTopic: true,
	transCheckTopic:  true,
	timerTopic:       true,
	keelTimerTopic:   true,
}

// IsSendable reports whether clients may send to topic t.
func IsSendable(t string) bool { return !notSendableTopics[t] }

func isSystemTopic(t string) bool {
	return systemTopics[t] || len(t) >= len(sysTopicPrefix) && t[:len(sysTopicPrefix)] == sysTopicPrefix
}

// RetryTopic is the retry topic of a consumer group.
func RetryTopic(group string) string { return retryPrefix + group }

// DLQTopic is the dead-letter topic of a consumer group.
func DLQTopic(group string) string { return dlqPrefix + group }

// IsRetryTopic reports whether t is a group's retry topic.
func IsRetryTopic(t string) bool {
	return len(t) > len(retryPrefix) && t[:len(retryPrefix)] == retryPrefix
}

// RetryGroup is the consumer group of a retry topic.
func RetryGroup(retryTopic string) string { return strings.TrimPrefix(retryTopic, retryPrefix) }
