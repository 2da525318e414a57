package amqp

import (
	"fmt"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// amqpError is a protocol error: a channel exception (closes the channel)
// or, with hard set, a connection exception (closes the connection). It
// is made at the method-handler boundary only.
type amqpError struct {
	code     uint16
	text     string
	classID  uint16
	methodID uint16
	hard     bool
}

func (e *amqpError) Error() string { return fmt.Sprintf("amqp: %d %s", e.code, e.text) }

// soft is a channel exception caused by method m (nil: none).
func soft(code uint16, m wire.Method, format string, a ...any) *amqpError {
	e := &amqpError{code: code, text: fmt.Sprintf(format, a...)}
	if m != nil {
		e.classID, e.methodID = m.ID()
	}
	return e
}

// hard is a connection exception caused by method m (nil: none).
func hard(code uint16, m wire.Method, format string, a ...any) *amqpError {
	e := soft(code, m, format, a...)
	e.hard = true
	return e
}

// replyText is the text of a close: RabbitMQ's style, the code's name first.
func (e *amqpError) replyText() string {
	name := codeNames[e.code]
	if name == "" {
		name = "ERROR"
	}
	t := name + " - " + e.text
	if len(t) > 255 {
		t = t[:255]
	}
	return t
}

var codeNames = map[uint16]string{
	wire.ReplySuccess: "OK", wire.ContentTooLarge: "CONTENT_TOO_LARGE", wire.NoRoute: "NO_ROUTE",
	wire.AccessRefused: "ACCESS_REFUSED", wire.NotFound: "NOT_FOUND", wire.ResourceLocked: "RESOURCE_LOCKED",
	wire.PreconditionFailed: "PRECONDITION_FAILED", wire.FrameError: "FRAME_ERROR", wire.SyntaxError: "SYNTAX_ERROR",
	wire.CommandInvalid: "COMMAND_INVALID", wire.ChannelError: "CHANNEL_ERROR", wire.UnexpectedFrame: "UNEXPECTED_FRAME",
	wire.ResourceError: "RESOURCE_ERROR", wire.NotAllowed: "NOT_ALLOWED", wire.NotImplemented: "NOT_IMPLEMENTED",
	wire.InternalError: "INTERNAL_ERROR", wire.ConnectionForced: "CONNECTION_FORCED",
}
