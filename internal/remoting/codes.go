package remoting

import "strconv"

// Request codes (Java RequestCode). The constants are untyped so they
// compare directly with Command.Code; RequestCode gives them a name.
const (
	ReqSendMessage                   = 10
	ReqPullMessage                   = 11
	ReqQueryMessage                  = 12
	ReqQueryConsumerOffset           = 14
	ReqUpdateConsumerOffset          = 15
	ReqUpdateAndCreateTopic          = 17
	ReqGetAllTopicConfig             = 21
	ReqUpdateBrokerConfig            = 25
	ReqGetBrokerConfig               = 26
	ReqGetBrokerRuntimeInfo          = 28
	ReqSearchOffsetByTimestamp       = 29
	ReqGetMaxOffset                  = 30
	ReqGetMinOffset                  = 31
	ReqGetEarliestMsgStoretime       = 32
	ReqViewMessageByID               = 33
	ReqHeartBeat                     = 34
	ReqUnregisterClient              = 35
	ReqConsumerSendMsgBack           = 36
	ReqEndTransaction                = 37
	ReqGetConsumerListByGroup        = 38
	ReqCheckTransactionState         = 39
	ReqNotifyConsumerIDsChanged      = 40
	ReqLockBatchMQ                   = 41
	ReqUnlockBatchMQ                 = 42
	ReqCheckClientConfig             = 46
	ReqPutKVConfig                   = 100
	ReqGetKVConfig                   = 101
	ReqDeleteKVConfig                = 102
	ReqRegisterBroker                = 103
	ReqUnregisterBroker              = 104
	ReqGetRouteInfoByTopic           = 105
	ReqGetBrokerClusterInfo          = 106
	ReqUpdateAndCreateSubscription   = 200
	ReqGetAllSubscriptionGroupConfig = 201
	ReqGetTopicStatsInfo             = 202
	ReqGetConsumerConnectionList     = 203
	ReqGetProducerConnectionList     = 204
	ReqGetAllTopicListFromNameServer = 206
	ReqDeleteSubscriptionGroup       = 207
	ReqGetConsumeStats               = 208
	ReqDeleteTopicInBroker           = 215
	ReqDeleteTopicInNamesrv          = 216
	ReqResetConsumerClientOffset     = 220
	ReqGetConsumerStatusFromClient   = 221
	ReqGetTopicsByCluster            = 224
	ReqQueryTopicConsumeByWho        = 300
	ReqGetConsumerRunningInfo        = 307
	ReqConsumeMessageDirectly        = 309
	ReqSendMessageV2                 = 310
	ReqSendBatchMessage              = 320
	ReqSendReplyMessage              = 324
	ReqSendReplyMessageV2            = 325
	ReqPushReplyMessageToClient      = 326

	// ReqListTransactions is Keel's private request listing a broker's
	// undecided transactional half messages (ext: topic, producerGroup,
	// limit, all optional). Keel's own codes are >= 10000 and < 32768,
	// above every RocketMQ code.
	ReqListTransactions = 10401
	// ReqListIsolatedRecords is Keel's private request listing the records
	// a broker's store isolated as corrupt (no ext fields).
	ReqListIsolatedRecords = 10402
	// ReqListAMQP is Keel's private request listing the AMQP queues and
	// exchanges of a broker's AMQP front door (no ext fields).
	ReqListAMQP = 10403

	// Keel's controller (internal/controller): requests brokers and the
	// CLI send to a controller, each a JSON body (a non-leader answers
	// ResControllerNotLeader with ext leaderAddr) ...
	ReqControllerRegister     = 10410
	ReqControllerHeartbeat    = 10411
	ReqControllerAlterInSync  = 10412
	ReqControllerGetGroup     = 10413
	ReqControllerStatus       = 10414
	ReqControllerAllowUnclean = 10415
	ReqControllerSwitchOver   = 10416
	// ... and requests the controller leader sends to a broker.
	ReqControllerFence       = 10420
	ReqControllerRoleChanged = 10421
	// ReqListKafka is Keel's private request listing the consumer groups
	// (members, assignments) and connections of a broker's Kafka front
	// door (no ext fields).
	ReqListKafka = 10404
	// ReqGetKafkaCluster is Keel's private NameServer request answering
	// the Kafka brokers of a cluster and the groups hosting each topic
	// (ext clusterName; JSON body, namesrv.KafkaCluster).
	ReqGetKafkaCluster = 10440
	// ReqGetAMQPCluster is Keel's private NameServer request answering
	// the AMQP doors of a cluster's members (ext clusterName; JSON body,
	// namesrv.AMQPCluster).
	ReqGetAMQPCluster = 10441
	// ReqKafkaGroupOffsets is Keel's private broker request a Kafka group
	// coordinator sends another group's master: commit, read or drop the
	// group's offsets of the queues it hosts (ext consumerGroup, topic,
	// op; JSON body, broker.KafkaOffsets).
	ReqKafkaGroupOffsets = 10450
	// ReqKafkaTopic is Keel's private broker request a Kafka door sends
	// another group's master to create its share of a topic spread over
	// the cluster, or to raise a spread topic's queue count (ext topic,
	// op, queues; JSON body, broker.KafkaTopic).
	ReqKafkaTopic = 10451
)

// Response codes (Java ResponseCode and RemotingSysResponseCode).
const (
	ResSuccess                   = 0
	ResSystemError               = 1
	ResSystemBusy                = 2
	ResRequestCodeNotSupported   = 3
	ResTransactionFailed         = 4
	ResFlushDiskTimeout          = 10
	ResSlaveNotAvailable         = 11
	ResFlushSlaveTimeout         = 12
	ResMessageIllegal            = 13
	ResServiceNotAvailable       = 14
	ResVersionNotSupported       = 15
	ResNoPermission              = 16
	ResTopicNotExist             = 17
	ResTopicExistAlready         = 18
	ResPullNotFound              = 19
	ResPullRetryImmediately      = 20
	ResPullOffsetMoved           = 21
	ResQueryNotFound             = 22
	ResSubscriptionParseFailed   = 23
	ResSubscriptionNotExist      = 24
	ResSubscriptionNotLatest     = 25
	ResSubscriptionGroupNotExist = 26
	ResFilterDataNotExist        = 27
	ResFilterDataNotLatest       = 28
	ResInvalidParameter          = 29
	ResNoBuyerID                 = 204
	ResNotInCurrentUnit          = 205
	ResConsumerNotOnline         = 206
	ResGoAway                    = 1500

	// Keel's controller answers (>= 10000, above every RocketMQ code).
	// ResControllerNotLeader: ext leaderAddr names the leader ("" while
	// none is known). ResControllerRejected: ext reason names the
	// rejection (controller.ErrStaleEpoch is STALE_EPOCH, ...).
	ResControllerNotLeader = 10430
	ResControllerRejected  = 10431
	// ResKeelTopicExists: KEEL_KAFKA_TOPIC's create found the topic.
	ResKeelTopicExists = 10452
)

// RequestCode names a request code for logs: RequestCode(cmd.Code).String().
type RequestCode int16

// ResponseCode names a response code for logs.
type ResponseCode int16

var requestCodeNames = map[int16]string{
	ReqSendMessage:                   "SEND_MESSAGE",
	ReqPullMessage:                   "PULL_MESSAGE",
	ReqQueryMessage:                  "QUERY_MESSAGE",
	ReqQueryConsumerOffset:           "QUERY_CONSUMER_OFFSET",
	ReqUpdateConsumerOffset:          "UPDATE_CONSUMER_OFFSET",
	ReqUpdateAndCreateTopic:          "UPDATE_AND_CREATE_TOPIC",
	ReqGetAllTopicConfig:             "GET_ALL_TOPIC_CONFIG",
	ReqUpdateBrokerConfig:            "UPDATE_BROKER_CONFIG",
	ReqGetBrokerConfig:               "GET_BROKER_CONFIG",
	ReqGetBrokerRuntimeInfo:          "GET_BROKER_RUNTIME_INFO",
	ReqSearchOffsetByTimestamp:       "SEARCH_OFFSET_BY_TIMESTAMP",
	ReqGetMaxOffset:                  "GET_MAX_OFFSET",
	ReqGetMinOffset:                  "GET_MIN_OFFSET",
	ReqGetEarliestMsgStoretime:       "GET_EARLIEST_MSG_STORETIME",
	ReqViewMessageByID:               "VIEW_MESSAGE_BY_ID",
	ReqHeartBeat:                     "HEART_BEAT",
	ReqUnregisterClient:              "UNREGISTER_CLIENT",
	ReqConsumerSendMsgBack:           "CONSUMER_SEND_MSG_BACK",
	ReqEndTransaction:                "END_TRANSACTION",
	ReqGetConsumerListByGroup:        "GET_CONSUMER_LIST_BY_GROUP",
	ReqCheckTransactionState:         "CHECK_TRANSACTION_STATE",
	ReqNotifyConsumerIDsChanged:      "NOTIFY_CONSUMER_IDS_CHANGED",
	ReqLockBatchMQ:                   "LOCK_BATCH_MQ",
	ReqUnlockBatchMQ:                 "UNLOCK_BATCH_MQ",
	ReqCheckClientConfig:             "CHECK_CLIENT_CONFIG",
	ReqPutKVConfig:                   "PUT_KV_CONFIG",
	ReqGetKVConfig:                   "GET_KV_CONFIG",
	ReqDeleteKVConfig:                "DELETE_KV_CONFIG",
	ReqRegisterBroker:                "REGISTER_BROKER",
	ReqUnregisterBroker:              "UNREGISTER_BROKER",
	ReqGetRouteInfoByTopic:           "GET_ROUTEINFO_BY_TOPIC",
	ReqGetBrokerClusterInfo:          "GET_BROKER_CLUSTER_INFO",
	ReqUpdateAndCreateSubscription:   "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
	ReqGetAllSubscriptionGroupConfig: "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
	ReqGetTopicStatsInfo:             "GET_TOPIC_STATS_INFO",
	ReqGetConsumerConnectionList:     "GET_CONSUMER_CONNECTION_LIST",
	ReqGetProducerConnectionList:     "GET_PRODUCER_CONNECTION_LIST",
	ReqGetAllTopicListFromNameServer: "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
	ReqDeleteSubscriptionGroup:       "DELETE_SUBSCRIPTIONGROUP",
	ReqGetConsumeStats:               "GET_CONSUME_STATS",
	ReqDeleteTopicInBroker:           "DELETE_TOPIC_IN_BROKER",
	ReqDeleteTopicInNamesrv:          "DELETE_TOPIC_IN_NAMESRV",
	ReqResetConsumerClientOffset:     "RESET_CONSUMER_CLIENT_OFFSET",
	ReqGetConsumerStatusFromClient:   "GET_CONSUMER_STATUS_FROM_CLIENT",
	ReqGetTopicsByCluster:            "GET_TOPICS_BY_CLUSTER",
	ReqQueryTopicConsumeByWho:        "QUERY_TOPIC_CONSUME_BY_WHO",
	ReqGetConsumerRunningInfo:        "GET_CONSUMER_RUNNING_INFO",
	ReqConsumeMessageDirectly:        "CONSUME_MESSAGE_DIRECTLY",
	ReqSendMessageV2:                 "SEND_MESSAGE_V2",
	ReqSendBatchMessage:              "SEND_BATCH_MESSAGE",
	ReqSendReplyMessage:              "SEND_REPLY_MESSAGE",
	ReqSendReplyMessageV2:            "SEND_REPLY_MESSAGE_V2",
	ReqPushReplyMessageToClient:      "PUSH_REPLY_MESSAGE_TO_CLIENT",
	ReqControllerRegister:            "KEEL_CONTROLLER_REGISTER",
	ReqControllerHeartbeat:           "KEEL_CONTROLLER_HEARTBEAT",
	ReqControllerAlterInSync:         "KEEL_CONTROLLER_ALTER_IN_SYNC",
	ReqControllerGetGroup:            "KEEL_CONTROLLER_GET_GROUP",
	ReqControllerStatus:              "KEEL_CONTROLLER_STATUS",
	ReqControllerAllowUnclean:        "KEEL_CONTROLLER_ALLOW_UNCLEAN",
	ReqControllerSwitchOver:          "KEEL_CONTROLLER_SWITCH_OVER",
	ReqControllerFence:               "KEEL_CONTROLLER_FENCE",
	ReqControllerRoleChanged:         "KEEL_CONTROLLER_ROLE_CHANGED",
	ReqGetKafkaCluster:               "KEEL_GET_KAFKA_CLUSTER",
	ReqGetAMQPCluster:                "KEEL_GET_AMQP_CLUSTER",
	ReqKafkaGroupOffsets:             "KEEL_KAFKA_GROUP_OFFSETS",
	ReqKafkaTopic:                    "KEEL_KAFKA_TOPIC",
}

var responseCodeNames = map[int16]string{
	ResSuccess:                   "SUCCESS",
	ResSystemError:               "SYSTEM_ERROR",
	ResSystemBusy:                "SYSTEM_BUSY",
	ResRequestCodeNotSupported:   "REQUEST_CODE_NOT_SUPPORTED",
	ResTransactionFailed:         "TRANSACTION_FAILED",
	ResFlushDiskTimeout:          "FLUSH_DISK_TIMEOUT",
	ResSlaveNotAvailable:         "SLAVE_NOT_AVAILABLE",
	ResFlushSlaveTimeout:         "FLUSH_SLAVE_TIMEOUT",
	ResMessageIllegal:            "MESSAGE_ILLEGAL",
	ResServiceNotAvailable:       "SERVICE_NOT_AVAILABLE",
	ResVersionNotSupported:       "VERSION_NOT_SUPPORTED",
	ResNoPermission:              "NO_PERMISSION",
	ResTopicNotExist:             "TOPIC_NOT_EXIST",
	ResTopicExistAlready:         "TOPIC_EXIST_ALREADY",
	ResPullNotFound:              "PULL_NOT_FOUND",
	ResPullRetryImmediately:      "PULL_RETRY_IMMEDIATELY",
	ResPullOffsetMoved:           "PULL_OFFSET_MOVED",
	ResQueryNotFound:             "QUERY_NOT_FOUND",
	ResSubscriptionParseFailed:   "SUBSCRIPTION_PARSE_FAILED",
	ResSubscriptionNotExist:      "SUBSCRIPTION_NOT_EXIST",
	ResSubscriptionNotLatest:     "SUBSCRIPTION_NOT_LATEST",
	ResSubscriptionGroupNotExist: "SUBSCRIPTION_GROUP_NOT_EXIST",
	ResFilterDataNotExist:        "FILTER_DATA_NOT_EXIST",
	ResFilterDataNotLatest:       "FILTER_DATA_NOT_LATEST",
	ResInvalidParameter:          "INVALID_PARAMETER",
	ResNoBuyerID:                 "NO_BUYER_ID",
	ResNotInCurrentUnit:          "NOT_IN_CURRENT_UNIT",
	ResConsumerNotOnline:         "CONSUMER_NOT_ONLINE",
	ResGoAway:                    "GO_AWAY",
	ResControllerNotLeader:       "KEEL_CONTROLLER_NOT_LEADER",
	ResControllerRejected:        "KEEL_CONTROLLER_REJECTED",
	ResKeelTopicExists:           "KEEL_TOPIC_EXISTS",
}

// String returns the Java name of the code, or "REQUEST_<n>" when unknown.
func (c RequestCode) String() string {
	if s, ok := requestCodeNames[int16(c)]; ok {
		return s
	}
	return "REQUEST_" + strconv.Itoa(int(c))
}

// String returns the Java name of the code, or "RESPONSE_<n>" when unknown.
func (c ResponseCode) String() string {
	if s, ok := responseCodeNames[int16(c)]; ok {
		return s
	}
	return "RESPONSE_" + strconv.Itoa(int(c))
}

// IsErrorCode reports whether a response code says the request failed: not
// SUCCESS nor one of the answers a working exchange gives (nothing new to
// pull yet, pull again, the offset moved, no message found), which the
// door's error counter leaves out.
func IsErrorCode(code int16) bool {
	switch code {
	case ResSuccess, ResPullNotFound, ResPullRetryImmediately, ResPullOffsetMoved, ResQueryNotFound:
		return false
	}
	return true
}
