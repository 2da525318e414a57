package broker

// The one place where the core's answers become RocketMQ response codes:
// the core's error kinds (coreErrorCodes), the store's put statuses
// (putStatusCode) and the store's get statuses (pullStatusCode, pull.go).
// A handler returns a core error as it is; errorResponse answers it with
// the kind's code and the error's message as the remark. Errors the
// adapter makes itself (a malformed header) are protoErrors, which carry
// their code.

import (
	"errors"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// coreErrorCodes maps each kind of core error to its response code.
var coreErrorCodes = map[error]int16{
	core.ErrInvalidArgument: remoting.ResInvalidParameter,
	core.ErrTopicNotFound:   remoting.ResTopicNotExist,
	core.ErrGroupNotFound:   remoting.ResSubscriptionGroupNotExist,
	core.ErrForbidden:       remoting.ResNoPermission,
	core.ErrMessageIllegal:  remoting.ResMessageIllegal,
	core.ErrLimitReached:    remoting.ResSystemError,
	core.ErrInternal:        remoting.ResSystemError,
	core.ErrBusy:            remoting.ResSystemBusy,
	core.ErrUnsupported:     remoting.ResSystemError,
	core.ErrInvalidFilter:   remoting.ResSubscriptionParseFailed,
}

// coreErrorCode returns the response code and remark of a core error; ok
// is false for any other error.
func coreErrorCode(err error) (code int16, remark string, ok bool) {
	var ce *core.Error
	if !errors.As(err, &ce) {
		return 0, "", false
	}
	code, ok = coreErrorCodes[ce.Kind]
	if !ok {
		code = remoting.ResSystemError
	}
	return code, ce.Msg, true
}

// errorCode returns the response code and remark a failed request gets:
// a protoError's or a core error's; ok is false for any other error (an
// operating error: SYSTEM_ERROR, and it is logged).
func errorCode(err error) (code int16, remark string, ok bool) {
	var pe *protoError
	if errors.As(err, &pe) {
		return pe.code, pe.msg, true
	}
	return coreErrorCode(err)
}

// putStatusCode maps a put status to the send response code.
func putStatusCode(s store.PutStatus) int16 {
	switch s {
	case store.PutOK:
		return remoting.ResSuccess
	case store.PutFlushDiskTimeout:
		return remoting.ResFlushDiskTimeout
	case store.PutFlushSlaveTimeout:
		return remoting.ResFlushSlaveTimeout
	case store.PutInSyncReplicasNotEnough:
		// RocketMQ 5's answer: not stored, and the official clients retry
		// a SYSTEM_ERROR on another broker group.
		return remoting.ResSystemError
	case store.PutMessageIllegal, store.PutPropertiesTooLong:
		return remoting.ResMessageIllegal
	case store.PutServiceNotAvailable, store.PutDiskFull:
		return remoting.ResServiceNotAvailable
	default:
		return remoting.ResSystemError
	}
}
