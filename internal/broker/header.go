package broker

// Request header (ext field) parsing and protocol errors.
//
// Protocol errors are *protoError values carrying a RocketMQ response code;
// handlers return them and the dispatcher turns them into responses. Every
// ext value the broker sends is a decimal string (the Go client drops a
// response with any other JSON type).

import (
	"fmt"
	"strconv"

	"github.com/keelmq/keel/internal/remoting"
)

// protoError is a request failure with a response code and remark.
type protoError struct {
	code int16
	msg  string
}

func (e *protoError) Error() string { return fmt.Sprintf("broker: code %d: %s", e.code, e.msg) }

func protoErrorf(code int16, format string, args ...any) error {
	return &protoError{code: code, msg: fmt.Sprintf(format, args...)}
}

// ext reads request ext fields, remembering the first error. It reads
// them only through the Command's accessors, never ExtFields: requests
// whose codes the handler lists (brokerHandler.ListsExt) have them as a
// list.
type ext struct {
	req *remoting.Command
	err error
}

func (e *ext) str(key string) string { return e.req.Ext(key) }

func (e *ext) required(key string) string {
	v, ok := e.req.LookupExt(key)
	if (!ok || v == "") && e.err == nil {
		e.err = protoErrorf(remoting.ResInvalidParameter, "the custom field <%s> is null", key)
	}
	return v
}

func (e *ext) int64(key string, def int64, required bool) int64 {
	v, ok := e.req.LookupExt(key)
	if !ok || v == "" {
		if required && e.err == nil {
			e.err = protoErrorf(remoting.ResInvalidParameter, "the custom field <%s> is null", key)
		}
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		if e.err == nil {
			e.err = protoErrorf(remoting.ResInvalidParameter, "the custom field <%s> is not an integer: %q", key, v)
		}
		return def
	}
	return n
}

func (e *ext) int32(key string, def int32, required bool) int32 {
	n := e.int64(key, int64(def), required)
	if n < -1<<31 || n > 1<<31-1 {
		if e.err == nil {
			e.err = protoErrorf(remoting.ResInvalidParameter, "the custom field <%s> is out of int32 range: %d", key, n)
		}
		return def
	}
	return int32(n)
}

func (e *ext) bool(key string) bool {
	v := e.req.Ext(key)
	return v == "true" || v == "TRUE" || v == "True"
}

func setExt(c *remoting.Command, kv ...string) {
	for i := 0; i+1 < len(kv); i += 2 {
		c.AddExt(kv[i], kv[i+1])
	}
}

func itoa[T ~int | ~int32 | ~int64](v T) string { return strconv.FormatInt(int64(v), 10) }
