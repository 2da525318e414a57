package kafka

import (
	"errors"

	"github.com/keelmq/keel/internal/core"
)

// Kafka error codes this front door answers (apache/kafka Errors.java),
// defined once.
const (
	errNone                    int16 = 0
	errUnknownServer           int16 = -1
	errOffsetOutOfRange        int16 = 1
	errCorruptMessage          int16 = 2
	errUnknownTopicOrPartition int16 = 3
	errLeaderNotAvailable      int16 = 5
	errNotLeaderOrFollower     int16 = 6
	errRequestTimedOut         int16 = 7
	errMessageTooLarge         int16 = 10
	errInvalidTopic            int16 = 17
	errNotEnoughReplicas       int16 = 19
	errInvalidRequiredAcks     int16 = 21
	errInvalidTimestamp        int16 = 32
	errTopicAuthorization      int16 = 29
	errUnsupportedVersion      int16 = 35
	errInvalidRequest          int16 = 42
	errPolicyViolation         int16 = 44
	errKafkaStorage            int16 = 56
	errFencedLeaderEpoch       int16 = 74
	errUnknownLeaderEpoch      int16 = 75
	errInvalidRecord           int16 = 87
)

// coreCode maps the core's error kinds to Kafka codes: the one table.
func coreCode(err error) int16 {
	switch {
	case err == nil:
		return errNone
	case errors.Is(err, core.ErrInvalidArgument):
		return errInvalidTopic
	case errors.Is(err, core.ErrTopicNotFound):
		return errUnknownTopicOrPartition
	case errors.Is(err, core.ErrForbidden):
		return errTopicAuthorization
	case errors.Is(err, core.ErrMessageIllegal):
		return errMessageTooLarge
	case errors.Is(err, core.ErrLimitReached):
		return errPolicyViolation
	case errors.Is(err, core.ErrBusy):
		return errRequestTimedOut
	}
	return errUnknownServer
}
