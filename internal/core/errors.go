package core

import (
	"errors"
	"fmt"
)

// Kinds of domain error. Every error the core returns for a request that
// cannot be served wraps one of these (errors.Is); a front door maps each
// to its protocol's answer in one table of its own (for RocketMQ:
// internal/broker/errors.go). Anything else the core returns is an
// operating error (a failed write, a broken store), which a front door
// logs and reports as its generic failure.
var (
	// ErrInvalidArgument: the request names something malformed (a topic
	// name, a queue id, a queue count, an offset).
	ErrInvalidArgument = errors.New("core: invalid argument")
	// ErrTopicNotFound: the topic does not exist and may not be created.
	ErrTopicNotFound = errors.New("core: topic not found")
	// ErrGroupNotFound: the consumer group does not exist and may not be
	// created.
	ErrGroupNotFound = errors.New("core: subscription group not found")
	// ErrForbidden: the broker, the topic or the group does not permit the
	// operation (write or read permission, a system topic, a feature that
	// is not enabled).
	ErrForbidden = errors.New("core: forbidden")
	// ErrMessageIllegal: the message itself is refused (too large, bad
	// properties, an unsupported combination).
	ErrMessageIllegal = errors.New("core: illegal message")
	// ErrLimitReached: a configured limit (MaxTopics, MaxGroups) is
	// reached.
	ErrLimitReached = errors.New("core: limit reached")
	// ErrInternal: the request failed inside the broker (a failed
	// lookup or check); the message says what failed.
	ErrInternal = errors.New("core: internal error")
	// ErrBusy: too many requests of this kind are waiting; back off.
	ErrBusy = errors.New("core: busy")
	// ErrUnsupported: the request asks for something the broker does not
	// implement (a filter expression type other than TAG).
	ErrUnsupported = errors.New("core: unsupported")
	// ErrInvalidFilter: a subscription's filter expression does not
	// compile.
	ErrInvalidFilter = errors.New("core: invalid filter expression")
)

// Kinds lists every kind of domain error, so that a front door's table
// can be checked to cover them all.
var Kinds = []error{ErrInvalidArgument, ErrTopicNotFound, ErrGroupNotFound, ErrForbidden,
	ErrMessageIllegal, ErrLimitReached, ErrInternal, ErrBusy, ErrUnsupported, ErrInvalidFilter}

// Error is a domain error: its Kind (one of the Err* sentinels above) and
// a message for the client.
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Kind.Error() + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrTopicNotFound) work.
func (e *Error) Unwrap() error { return e.Kind }

// Errorf makes a domain error of the given kind.
func Errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}
