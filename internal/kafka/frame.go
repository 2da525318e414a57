package kafka

// Framing: a request is int32 size, then the request header (v1: api key
// int16, api version int16, correlation id int32, client id as a nullable
// non-compact string; v2, for flexible versions, adds tagged fields), then
// the body, which kmsg decodes. Limits: a frame above Config.MaxRequestBytes
// is refused before it is read; a header that does not parse, or a body
// kmsg refuses, closes the connection after a log line (Kafka does the
// same: there is no way to answer a request whose correlation id is not
// known). decodeRequest never panics on any input (FuzzDecodeRequest).

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrMalformed is wrapped by errors about a request that does not parse.
var ErrMalformed = errors.New("kafka: malformed request")

// request is one decoded request.
type request struct {
	key         int16
	version     int16
	correlation int32
	clientID    string
	host        string // the client's address (set by the connection)
	user        string // the connection's SASL account ("": none), set before it is served
	// body is nil when the key is not served or the version is outside the
	// advertised range (unsupported says which).
	body        kmsg.Request
	unsupported bool
}

// flexibleHeader reports whether a request of key at version has the v2
// header (tagged fields), judged by kmsg's own knowledge of the key.
func flexibleHeader(r kmsg.Request) bool { return r.IsFlexible() }

// decodeRequest parses one frame's bytes (without the size prefix).
func decodeRequest(frame []byte) (*request, error) { return decodeRequestBounded(frame, nil) }

// decodeRequestBounded parses one frame's bytes. The body is walked first
// (prepassCost, bound.go): one that would allocate more than its bound is
// refused before kmsg decodes it, and reserve, if not nil, is told what
// decoding and handling will allocate (beyond the frame) before it
// happens; an error from reserve is returned as is.
func decodeRequestBounded(frame []byte, reserve func(costBytes int64) error) (*request, error) {
	if len(frame) < 10 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a request header", ErrMalformed, len(frame))
	}
	be := binary.BigEndian
	req := &request{
		key:         int16(be.Uint16(frame)),
		version:     int16(be.Uint16(frame[2:])),
		correlation: int32(be.Uint32(frame[4:])),
	}
	n := int(int16(be.Uint16(frame[8:])))
	rest := frame[10:]
	if n > 0 {
		if n > len(rest) {
			return nil, fmt.Errorf("%w: client id of %d bytes, %d left", ErrMalformed, n, len(rest))
		}
		req.clientID = string(rest[:n])
		rest = rest[n:]
	} else if n < -1 {
		return nil, fmt.Errorf("%w: client id length %d", ErrMalformed, n)
	}
	api, ok := apis[req.key]
	if !ok || req.version < api.min || req.version > api.max {
		req.unsupported = true
		return req, nil
	}
	body := kmsg.RequestForKey(req.key)
	if body == nil {
		req.unsupported = true
		return req, nil
	}
	body.SetVersion(req.version)
	if flexibleHeader(body) {
		var err error
		if rest, err = skipTags(rest); err != nil {
			return nil, err
		}
	}
	cost, elements, err := prepassCost(body, rest)
	if err != nil {
		return nil, fmt.Errorf("%s v%d body of %d bytes (%d bytes decoded and %d elements at least, limit %d bytes): %w",
			kmsg.NameForKey(req.key), req.version, len(rest), cost, elements, decodeLimit(len(rest)), err)
	}
	if reserve != nil {
		if err := reserve(cost + elements*handlerBytesPerElement); err != nil {
			return nil, err
		}
	}
	if err := body.ReadFrom(rest); err != nil {
		return nil, fmt.Errorf("%w: %s v%d body: %v", ErrMalformed, kmsg.NameForKey(req.key), req.version, err)
	}
	req.body = body
	return req, nil
}

// skipTags skips a tagged-field section (uvarint count, then per field a
// uvarint tag, a uvarint size and the bytes).
func skipTags(b []byte) ([]byte, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: tagged field count", ErrMalformed)
	}
	b = b[n:]
	for i := uint64(0); i < count; i++ {
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, fmt.Errorf("%w: tag %d", ErrMalformed, i)
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || size > uint64(len(b)-n) {
			return nil, fmt.Errorf("%w: tag %d size", ErrMalformed, i)
		}
		b = b[n+int(size):]
	}
	return b, nil
}

// appendResponse appends a whole response frame: size, correlation id, the
// header's tag byte for flexible responses (not ApiVersions, whose
// response header stays v0) and the body.
func appendResponse(dst []byte, correlation int32, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(correlation))
	if resp.IsFlexible() && resp.Key() != 18 {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}
