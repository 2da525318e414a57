package broker

// Request codes handled (or sent) by the broker. Names follow RocketMQ's
// RequestCode; values are the wire numbers.
const (
	reqSendMessage              int16 = 10
	reqPullMessage              int16 = 11
	reqQueryMessage             int16 = 12
	reqQueryConsumerOffset      int16 = 14
	reqUpdateConsumerOffset     int16 = 15
	reqUpdateAndCreateTopic     int16 = 17
	reqGetBrokerRuntimeInfo     int16 = 28
	reqSearchOffsetByTimestamp  int16 = 29
	reqGetMaxOffset             int16 = 30
	reqGetMinOffset             int16 = 31
	reqGetEarliestMsgStoreTime  int16 = 32
	reqViewMessageByID          int16 = 33
	reqHeartBeat                int16 = 34
	reqUnregisterClient         int16 = 35
	reqConsumerSendMsgBack      int16 = 36
	reqEndTransaction           int16 = 37
	reqGetConsumerListByGroup   int16 = 38
	reqCheckTransactionState    int16 = 39
	reqNotifyConsumerIDsChanged int16 = 40
	reqLockBatchMQ              int16 = 41
	reqUnlockBatchMQ            int16 = 42
	reqCheckClientConfig        int16 = 46
	reqRegisterBroker           int16 = 103
	reqUnregisterBroker         int16 = 104
	reqGetAllSubscriptionGroup  int16 = 201
	reqGetTopicStatsInfo        int16 = 202
	reqDeleteTopicInBroker      int16 = 215
	reqSendMessageV2            int16 = 310
	reqSendBatchMessage         int16 = 320
)

// Response codes (RocketMQ ResponseCode / RemotingSysResponseCode).
const (
	codeSuccess                   int16 = 0
	codeSystemError               int16 = 1
	codeSystemBusy                int16 = 2
	codeRequestCodeNotSupported   int16 = 3
	codeFlushDiskTimeout          int16 = 10
	codeMessageIllegal            int16 = 13
	codeServiceNotAvailable       int16 = 14
	codeNoPermission              int16 = 16
	codeTopicNotExist             int16 = 17
	codePullNotFound              int16 = 19
	codePullRetryImmediately      int16 = 20
	codePullOffsetMoved           int16 = 21
	codeQueryNotFound             int16 = 22
	codeSubscriptionParseFailed   int16 = 23
	codeSubscriptionNotExist      int16 = 24
	codeSubscriptionNotLatest     int16 = 25
	codeSubscriptionGroupNotExist int16 = 26
	codeInvalidParameter          int16 = 29
)

// Permission bits of a topic (PermName).
const (
	permInherit int32 = 0x1
	permWrite   int32 = 0x2
	permRead    int32 = 0x4
	permRW            = permRead | permWrite
)

// Topic and group naming.
const (
	// DefaultTopic is the template topic producers name when sending to a topic
	// that does not exist yet (auto-creation).
	DefaultTopic     = "TBW102"
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

// Pull request sysFlag bits.
const (
	pullFlagCommitOffset int32 = 0x1
	pullFlagSuspend      int32 = 0x2
	pullFlagSubscription int32 = 0x4
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
	"SELF_TEST_TOPIC":     true,
}

// notSendableTopics reject client sends with NO_PERMISSION: they are written
// only by the broker itself.
var notSendableTopics = map[string]bool{
	scheduleTopic:    true,
	transHalfTopic:   true,
	transOpHalfTopic: true,
	transCheckTopic:  true,
	timerTopic:       true,
	keelTimerTopic:   true,
}

func isSystemTopic(t string) bool {
	return systemTopics[t] || len(t) >= len(sysTopicPrefix) && t[:len(sysTopicPrefix)] == sysTopicPrefix
}

// RetryTopic is the retry topic of a consumer group.
func RetryTopic(group string) string { return retryPrefix + group }

// DLQTopic is the dead-letter topic of a consumer group.
func DLQTopic(group string) string { return dlqPrefix + group }

func isRetryTopic(t string) bool {
	return len(t) > len(retryPrefix) && t[:len(retryPrefix)] == retryPrefix
}
