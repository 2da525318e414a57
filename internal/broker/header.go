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
	return e.requiredVal(key, v, ok)
}

// requiredVal is required for a field already looked up (fieldSet).
func (e *ext) requiredVal(key, v string, ok bool) string {
	if (!ok || v == "") && e.err == nil {
		e.err = protoErrorf(remoting.ResInvalidParameter, "the custom field <%s> is null", key)
	}
	return v
}

func (e *ext) int64(key string, def int64, required bool) int64 {
	v, ok := e.req.LookupExt(key)
	return e.int64Val(key, v, ok, def, required)
}

// int64Val is int64 for a field already looked up (fieldSet).
func (e *ext) int64Val(key, v string, ok bool, def int64, required bool) int64 {
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
	v, ok := e.req.LookupExt(key)
	return e.int32Val(key, v, ok, def, required)
}

// int32Val is int32 for a field already looked up (fieldSet).
func (e *ext) int32Val(key, v string, ok bool, def int32, required bool) int32 {
	n := e.int64Val(key, v, ok, int64(def), required)
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

// maxSetFields is the most fields a fieldSet reads.
const maxSetFields = 16

// fieldSet holds the values of the ext fields a handler reads, found in
// one pass over a request's list of ext fields (a dozen fields searched
// for a dozen keys each was a visible share of a send's CPU), or with one
// lookup each in its map.
type fieldSet struct {
	val [maxSetFields]string
	has [maxSetFields]bool
}

// read fills fs from req for keys, field i being keys[i]; index returns
// the i of a key, or -1 for a key not read (it must agree with keys).
func (fs *fieldSet) read(req *remoting.Command, keys []string, index func(key string) int) {
	n, listed := req.ListedExts()
	if !listed {
		for i, k := range keys {
			fs.val[i], fs.has[i] = req.LookupExt(k)
		}
		return
	}
	for j := range n {
		k, v := req.ListedExt(j)
		if i := index(k); i >= 0 {
			fs.val[i], fs.has[i] = v, true
		}
	}
}

func setExt(c *remoting.Command, kv ...string) {
	for i := 0; i+1 < len(kv); i += 2 {
		c.AddExt(kv[i], kv[i+1])
	}
}

func itoa[T ~int | ~int32 | ~int64](v T) string { return strconv.FormatInt(int64(v), 10) }
