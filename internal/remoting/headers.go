package remoting

// Request header facts of RocketMQ's protocol that more than one package
// needs (the broker that decodes them, the admin and bench clients that
// encode them). Each is defined here once.

// PULL_MESSAGE sysFlag bits (Java PullSysFlag).
const (
	PullFlagCommitOffset = 0x1 // store the request's commitOffset for the group
	PullFlagSuspend      = 0x2 // the broker may hold the pull until data arrives
	PullFlagSubscription = 0x4 // the request carries its subscription expression
)

// Fields of a send request header (SendMessageRequestHeader), as indexes
// into SendKeysV1 and SendKeysV2.
const (
	SendProducerGroup = iota
	SendTopic
	SendDefaultTopic
	SendDefaultTopicQueueNums
	SendQueueID
	SendSysFlag
	SendBornTimestamp
	SendFlag
	SendProperties
	SendReconsumeTimes
	SendUnitMode
	SendMaxReconsumeTimes
	SendBatch
	sendFields
)

// SendKeysV1 are the header keys of SEND_MESSAGE (10); SendKeysV2 those
// of SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320), RocketMQ's short
// names. Both are indexed by the Send* field constants.
var (
	SendKeysV1 = [sendFields]string{"producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
		"sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch"}
	SendKeysV2 = [sendFields]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m"}
)

// SendField returns the Send* field that key names in the header of a
// send request with the given code (SendKeys), or -1 if none: what a
// search of SendKeys finds, without the search.
func SendField(code int16, key string) int {
	if code != ReqSendMessage {
		if len(key) == 1 && key[0] >= 'a' && int(key[0]-'a') < sendFields {
			return int(key[0] - 'a')
		}
		return -1
	}
	switch key {
	case "producerGroup":
		return SendProducerGroup
	case "topic":
		return SendTopic
	case "defaultTopic":
		return SendDefaultTopic
	case "defaultTopicQueueNums":
		return SendDefaultTopicQueueNums
	case "queueId":
		return SendQueueID
	case "sysFlag":
		return SendSysFlag
	case "bornTimestamp":
		return SendBornTimestamp
	case "flag":
		return SendFlag
	case "properties":
		return SendProperties
	case "reconsumeTimes":
		return SendReconsumeTimes
	case "unitMode":
		return SendUnitMode
	case "maxReconsumeTimes":
		return SendMaxReconsumeTimes
	case "batch":
		return SendBatch
	}
	return -1
}

// SendKeys returns the header keys of a send request with the given code.
func SendKeys(code int16) *[sendFields]string {
	if code == ReqSendMessage {
		return &SendKeysV1
	}
	return &SendKeysV2
}
