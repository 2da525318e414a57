package amqp

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

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

// Every exception the broker sends (channel.close, connection.close) is
// logged once, by logException: WARN when the client caused it, ERROR for
// 541 INTERNAL_ERROR (the broker's own failure), with the keys remote,
// user, vhost, channel (0: the connection), method (the class.method that
// caused it, "" if none), code and reason (the reply text as sent). A
// connection logs at most exceptionBurst lines at once and then one per
// exceptionEvery; the lines dropped meanwhile are counted in the next
// one's suppressed key, so a client causing exceptions in a loop cannot
// flood the log.
const (
	exceptionBurst = 10
	exceptionEvery = time.Second
)

// exceptionLimiter is a connection's token bucket for exception lines.
type exceptionLimiter struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

// allow takes a token if there is one; it returns whether to log and how
// many lines were dropped since the last one logged.
func (l *exceptionLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens = exceptionBurst
	} else {
		l.tokens = min(exceptionBurst, l.tokens+float64(now.Sub(l.last))/float64(exceptionEvery))
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return false, 0
	}
	l.tokens--
	n := l.suppressed
	l.suppressed = 0
	return true, n
}

// methodName names class.method ids ("" for none or unknown).
func methodName(classID, methodID uint16) string {
	if classID == 0 {
		return ""
	}
	if m := wire.NewMethod(classID, methodID); m != nil {
		return m.Name()
	}
	return fmt.Sprintf("%d.%d", classID, methodID)
}

// logException logs the exception e sent on channel ch (0: a connection
// exception).
func (c *conn) logException(ch uint16, e *amqpError) {
	ok, suppressed := c.exLimit.allow(time.Now())
	if !ok {
		return
	}
	level, msg := slog.LevelWarn, "amqp: channel exception"
	if ch == 0 {
		msg = "amqp: connection exception"
	}
	if e.code == wire.InternalError {
		level = slog.LevelError
	}
	vhost := ""
	if c.vh != nil {
		vhost = c.vh.name
	}
	attrs := []slog.Attr{slog.String("remote", c.nc.RemoteAddr().String()), slog.String("user", c.user),
		slog.String("vhost", vhost), slog.Int("channel", int(ch)), slog.String("method", methodName(e.classID, e.methodID)),
		slog.Int("code", int(e.code)), slog.String("reason", e.replyText())}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	c.srv.log.LogAttrs(c.srv.baseCtx, level, msg, attrs...)
}
