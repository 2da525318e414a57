package admin

// Java's fastjson writes a Map<MessageQueue, V> with the MessageQueue
// objects themselves as keys, which is not JSON:
//
//	{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"minOffset":0,...}},"consumeTps":0.0}
//
// RocketMQ's admin bodies (TopicStatsTable, ConsumeStats) use that form, so
// this file reads it: a small scanner that splits such an object into raw
// key and value texts, each of which is then plain JSON.

import (
	"encoding/json"
	"errors"
	"fmt"
)

// MessageQueue identifies one queue of a topic on a broker.
type MessageQueue struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int32  `json:"queueId"`
}

var errBadTable = errors.New("admin: malformed object")

// jsonScanner walks fastjson text.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume skips white space and then c, reporting whether c was there.
func (s *jsonScanner) consume(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// value returns the raw text of the next value: a string, an object or
// array (whose keys may themselves be objects), or a literal.
func (s *jsonScanner) value() ([]byte, error) {
	s.ws()
	start := s.i
	if s.i >= len(s.b) {
		return nil, errBadTable
	}
	switch s.b[s.i] {
	case '"':
		if err := s.str(); err != nil {
			return nil, err
		}
	case '{', '[':
		if err := s.nested(); err != nil {
			return nil, err
		}
	default:
		for s.i < len(s.b) && !isDelim(s.b[s.i]) {
			s.i++
		}
		if s.i == start {
			return nil, errBadTable
		}
	}
	return s.b[start:s.i], nil
}

func isDelim(c byte) bool {
	switch c {
	case ',', ':', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

func (s *jsonScanner) str() error {
	for s.i++; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			s.i++
		case '"':
			s.i++
			return nil
		}
	}
	return errBadTable
}

func (s *jsonScanner) nested() error {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			if err := s.str(); err != nil {
				return err
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.i++
				return nil
			}
		}
		s.i++
	}
	return errBadTable
}

// objectEntries calls fn with the raw key and value of every entry of the
// object text b. Keys may be strings or objects.
func objectEntries(b []byte, fn func(key, val []byte) error) error {
	s := &jsonScanner{b: b}
	if !s.consume('{') {
		return errBadTable
	}
	if s.consume('}') {
		return nil
	}
	for {
		k, err := s.value()
		if err != nil {
			return err
		}
		if !s.consume(':') {
			return errBadTable
		}
		v, err := s.value()
		if err != nil {
			return err
		}
		if err := fn(k, v); err != nil {
			return err
		}
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			return nil
		}
		return errBadTable
	}
}

// topField returns the raw value of a top-level field of an object.
func topField(b []byte, name string) ([]byte, bool, error) {
	var out []byte
	found := false
	err := objectEntries(b, func(k, v []byte) error {
		var key string
		if json.Unmarshal(k, &key) == nil && key == name {
			out, found = v, true
		}
		return nil
	})
	return out, found, err
}

// decodeMQTable decodes the field of body that maps MessageQueue to V.
func decodeMQTable[V any](body []byte, field string) (map[MessageQueue]V, error) {
	raw, ok, err := topField(body, field)
	if err != nil {
		return nil, fmt.Errorf("admin: decode %s: %w", field, err)
	}
	out := make(map[MessageQueue]V)
	if !ok || string(raw) == "null" {
		return out, nil
	}
	err = objectEntries(raw, func(k, v []byte) error {
		var mq MessageQueue
		if len(k) > 0 && k[0] == '"' { // a key written as a JSON string holding the object
			var s string
			if err := json.Unmarshal(k, &s); err != nil {
				return err
			}
			k = []byte(s)
		}
		if err := json.Unmarshal(k, &mq); err != nil {
			return fmt.Errorf("queue key %s: %w", k, err)
		}
		var val V
		if err := json.Unmarshal(v, &val); err != nil {
			return fmt.Errorf("value of %s: %w", k, err)
		}
		out[mq] = val
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("admin: decode %s: %w", field, err)
	}
	return out, nil
}
