package remoting

import (
	"errors"
	"fmt"
	"strconv"
)

// Flag bits of Command.Flag.
const (
	FlagResponse = 1 // bit0: the frame is a response
	FlagOneway   = 2 // bit1: the request expects no response
)

// Serialize types (the high byte of the header-length word).
const (
	SerializeJSON     byte = 0
	SerializeRocketMQ byte = 1
)

// Version is the MQVersion ordinal we put in the commands we create
// (V4_9_4). Clients store a broker's response version; it must be >= 233
// for Java SQL92 pulls and non-negative for the Go client.
const Version int16 = 401

// Language names we use when creating commands.
const (
	LanguageGo   = "GO"
	LanguageJava = "JAVA"
)

// Command is one remoting request or response.
type Command struct {
	Code     int16
	Language string
	Version  int16
	Opaque   int32
	Flag     int32
	Remark   string
	// ExtFields are the header's ext fields. A request decoded for a
	// handler that lists its code (ExtLister) has them in a list instead
	// and ExtFields nil: read them with Ext, LookupExt, ExtInt64, ExtInt32,
	// ExtBool or RangeExt, which see either.
	ExtFields map[string]string
	Body      []byte
	// BodyParts, written after Body in the same vectored write, are the
	// rest of the body: the frame's body is Body followed by every part, and
	// the length field counts them all. They let a sender hand over buffers
	// it does not want to concatenate (a pull response's stored records).
	// Only outgoing commands use it; a decoded command has it nil.
	BodyParts [][]byte
	// OnWritten, if set on an outgoing command, is called exactly once when
	// the connection no longer needs Body and BodyParts: after the frame
	// was written to the socket, or when it was dropped (encode error,
	// frame too large, connection closed, response to a oneway request).
	// It runs on the writer's or the sender's goroutine and must not block.
	OnWritten func()
	// HeldBytes, if larger than the frame, is the memory the command holds
	// until OnWritten (e.g. whole pooled buffers lent as BodyParts): the
	// connection's response budget counts it instead of the frame size.
	HeldBytes int
	// SerializeType is the header encoding: SerializeJSON or SerializeRocketMQ.
	SerializeType byte

	// frame is the pooled buffer a received request was read into, set
	// when the handler borrows its body (BodyBorrower); keepBody withdraws
	// it from reuse (KeepBody).
	frame    []byte
	keepBody bool
	// reply is set by Conn.Defer.
	reply *Reply
	// ext holds the ext fields of a request decoded as a list (ExtLister),
	// each key once, in header order; nil when ExtFields is used.
	ext []extPair
}

// BodyLen is the length of the whole body: Body and every BodyParts part.
func (c *Command) BodyLen() int {
	n := len(c.Body)
	for _, p := range c.BodyParts {
		n += len(p)
	}
	return n
}

// written calls and clears OnWritten.
func (c *Command) written() {
	if fn := c.OnWritten; fn != nil {
		c.OnWritten = nil
		fn()
	}
}

// ErrExtMissing is returned by the Ext* accessors when the key is absent.
var ErrExtMissing = errors.New("remoting: header field missing")

// NewRequest makes a JSON request with our language and version. The
// opaque is assigned when the request is sent.
func NewRequest(code int16, ext map[string]string, body []byte) *Command {
	return &Command{
		Code:      code,
		Language:  LanguageGo,
		Version:   Version,
		ExtFields: ext,
		Body:      body,
	}
}

// NewResponse makes a response to c: same opaque and serialize type, the
// response flag set, language JAVA (older Java clients parse the enum by
// name) and our version.
func (c *Command) NewResponse(code int16, remark string) *Command {
	r := c.response(code, remark)
	return &r
}

// response is the response NewResponse and NewResponseIn make.
func (c *Command) response(code int16, remark string) Command {
	return Command{
		Code:          code,
		Language:      LanguageJava,
		Version:       Version,
		Opaque:        c.Opaque,
		Flag:          FlagResponse,
		Remark:        remark,
		SerializeType: c.SerializeType,
	}
}

// ResponseBuf is room for a response and its first ext fields (those
// AddExt adds), for a sender to embed in a value it makes per request
// anyway: the response then costs no allocation of its own (a send's
// response was a command and a list of fields, two of the dozen
// allocations of a send). A command made in it (NewResponseIn) is used
// like any other; the buffer must not be used again while it is.
type ResponseBuf struct {
	cmd Command
	ext [addExtFields]extPair
}

// NewResponseIn is NewResponse made in buf.
func (c *Command) NewResponseIn(buf *ResponseBuf, code int16, remark string) *Command {
	buf.cmd = c.response(code, remark)
	buf.cmd.ext = buf.ext[:0]
	return &buf.cmd
}

// IsResponse reports whether the response flag bit is set.
func (c *Command) IsResponse() bool { return c.Flag&FlagResponse != 0 }

// IsOneway reports whether the oneway flag bit is set. The Go client never
// sets it, so a request without it may still be treated as oneway by its
// sender; the server replies anyway.
func (c *Command) IsOneway() bool { return c.Flag&FlagOneway != 0 }

// Ext returns the ext field key, or "" when absent.
func (c *Command) Ext(key string) string {
	v, _ := c.LookupExt(key)
	return v
}

// LookupExt returns the ext field key and whether it is present.
func (c *Command) LookupExt(key string) (string, bool) {
	if len(c.ext) == 0 {
		v, ok := c.ExtFields[key]
		return v, ok
	}
	for i := range c.ext {
		if c.ext[i].key == key {
			return c.ext[i].value, true
		}
	}
	return "", false
}

// ListedExts returns how many ext fields the command holds as a list
// (a request decoded for an ExtLister, a response built with AddExt),
// each key once, read with ListedExt; ok is false when it holds them in
// ExtFields instead. A reader of many fields goes through the list once
// instead of searching it for each (LookupExt).
func (c *Command) ListedExts() (n int, ok bool) { return len(c.ext), c.ExtFields == nil }

// ListedExt returns the i-th field of the list (0 <= i < ListedExts).
func (c *Command) ListedExt(i int) (key, value string) { return c.ext[i].key, c.ext[i].value }

// RangeExt calls fn with every ext field, in no particular order.
func (c *Command) RangeExt(fn func(key, value string)) {
	for k, v := range c.ExtFields {
		fn(k, v)
	}
	for _, f := range c.ext {
		fn(f.key, f.value)
	}
}

// SetExt sets an ext field, creating the map when needed (a list becomes
// the map first).
func (c *Command) SetExt(key, value string) {
	if c.ExtFields == nil {
		c.ExtFields = make(map[string]string, max(8, len(c.ext)+1))
	}
	for _, f := range c.ext {
		c.ExtFields[f.key] = f.value
	}
	c.ext = nil
	c.ExtFields[key] = value
}

// AddExt sets an ext field of a command being built (a response): unless
// the command has the map already, its fields are kept as a list, which
// costs one small allocation and no hashing for the few fields a response
// has, and ExtFields stays nil (read them with Ext, LookupExt or
// RangeExt; SetExt makes the map). A key set again takes the new value.
func (c *Command) AddExt(key, value string) {
	if c.ExtFields != nil {
		c.ExtFields[key] = value
		return
	}
	for i := range c.ext {
		if c.ext[i].key == key {
			c.ext[i].value = value
			return
		}
	}
	if c.ext == nil {
		c.ext = make([]extPair, 0, addExtFields)
	}
	c.ext = append(c.ext, extPair{key, value})
}

// addExtFields is the room AddExt makes for a response's fields at once
// (a send's has six, a pull's four).
const addExtFields = 6

// ExtInt64 parses the ext field key as a decimal int64.
func (c *Command) ExtInt64(key string) (int64, error) {
	s, ok := c.LookupExt(key)
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrExtMissing, key)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("remoting: header field %s=%q: not an int64", key, s)
	}
	return v, nil
}

// ExtInt32 parses the ext field key as a decimal int32.
func (c *Command) ExtInt32(key string) (int32, error) {
	s, ok := c.LookupExt(key)
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrExtMissing, key)
	}
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("remoting: header field %s=%q: not an int32", key, s)
	}
	return int32(v), nil
}

// ExtBool parses the ext field key as "true" or "false" (case-insensitive,
// like Java's Boolean.parseBoolean, but anything else is an error).
func (c *Command) ExtBool(key string) (bool, error) {
	s, ok := c.LookupExt(key)
	if !ok {
		return false, fmt.Errorf("%w: %s", ErrExtMissing, key)
	}
	switch s {
	case "true", "True", "TRUE":
		return true, nil
	case "false", "False", "FALSE":
		return false, nil
	}
	return false, fmt.Errorf("remoting: header field %s=%q: not a bool", key, s)
}

// String formats the command for logs (body length only).
func (c *Command) String() string {
	kind := "request"
	if c.IsResponse() {
		kind = "response"
	}
	ext := c.ExtFields
	if len(c.ext) > 0 {
		ext = make(map[string]string, len(c.ext))
		c.RangeExt(func(k, v string) { ext[k] = v })
	}
	return fmt.Sprintf("%s code=%d opaque=%d flag=%d remark=%q ext=%v body=%dB",
		kind, c.Code, c.Opaque, c.Flag, c.Remark, ext, c.BodyLen())
}

// languageNames maps the ROCKETMQ language byte to its Java enum name.
var languageNames = [...]string{
	"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER",
	"HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS",
}

// languageOther is the name used for unknown language bytes.
const languageOther = "OTHER"

func languageName(b byte) string {
	if int(b) < len(languageNames) {
		return languageNames[b]
	}
	return languageOther
}

func languageCode(name string) byte {
	for i, n := range languageNames {
		if n == name {
			return byte(i)
		}
	}
	return 7 // OTHER
}
