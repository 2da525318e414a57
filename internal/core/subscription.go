package core

// Subscriptions: what a consumer group reads of a topic, as a filter
// expression, and the filter the store applies on a read.
//
// A TAG expression is "*" / "" (everything) or tags joined by "||". Tag
// codes are recomputed with message.TagsCode (Java String.hashCode), never
// taken from a client: clients hash tags differently (the RocketMQ Go
// client hashes UTF-8 bytes, Java UTF-16; they differ for non-ASCII tags).
// The code is the coarse filter on ConsumeQueue entries; the record's real
// TAGS value confirms the match, so a hash collision never delivers a
// message of another tag. Other expression types (SQL92) are
// ErrUnsupported; an expression naming no tag is ErrInvalidFilter.

import (
	"strings"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// FilterTag is the one filter expression type the core evaluates.
const FilterTag = "TAG"

// errSQL92 is the message of an unsupported expression type (RocketMQ's
// words, which its clients show).
const errSQL92 = "The broker does not support consumer to filter message by SQL92"

// Subscription is a consumer's subscription to one topic: its filter
// expression compiled. A Subscription is immutable once made.
type Subscription struct {
	Topic      string
	Expression string // as the consumer gave it
	Type       string // expression type (FilterTag)
	// Version orders a group's subscriptions (a front door refuses a read
	// that names a newer version than the one registered).
	Version int64
	// Err is set for a subscription registered although its expression did
	// not compile: reads under it fail with Err.
	Err error

	all   bool
	tags  map[string]struct{}
	codes map[int64]struct{}
}

// CheckFilterType returns ErrUnsupported unless exprType is "" or TAG.
func CheckFilterType(exprType string) error {
	if exprType != "" && !strings.EqualFold(exprType, FilterTag) {
		return Errorf(ErrUnsupported, "%s", errSQL92)
	}
	return nil
}

// ParseSubscription compiles a subscription expression.
func ParseSubscription(topic, expr, exprType string, version int64) (*Subscription, error) {
	if err := CheckFilterType(exprType); err != nil {
		return nil, err
	}
	s := &Subscription{Topic: topic, Expression: expr, Type: FilterTag, Version: version}
	expr = strings.TrimSpace(expr)
	if expr == "" || expr == "*" {
		s.all = true
		return s, nil
	}
	s.tags = make(map[string]struct{})
	s.codes = make(map[int64]struct{})
	for _, t := range strings.Split(expr, "||") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		s.tags[t] = struct{}{}
		s.codes[message.TagsCode(t)] = struct{}{}
	}
	if len(s.tags) == 0 {
		return nil, Errorf(ErrInvalidFilter, "parse the consumer's subscription[%s] failed", expr)
	}
	return s, nil
}

// FailedSubscription is a subscription whose expression did not compile
// (err from ParseSubscription), kept so that reads report err.
func FailedSubscription(topic, expr, exprType string, err error) *Subscription {
	return &Subscription{Topic: topic, Expression: expr, Type: exprType, Err: err}
}

// MatchesAll reports whether s lets every message through.
func (s *Subscription) MatchesAll() bool { return s == nil || s.all }

// Tags returns the number of distinct tags s names (0 for everything).
func (s *Subscription) Tags() int { return len(s.tags) }

// Filter returns the store filter of s (nil = every message).
func (s *Subscription) Filter() store.Filter {
	if s.MatchesAll() {
		return nil
	}
	return tagFilter{s}
}

// MatchCode implements TagsMatcher: whether a ConsumeQueue tags code may
// match (a held read's wake-up filter).
func (s *Subscription) MatchCode(code int64) bool {
	if s.MatchesAll() {
		return true
	}
	_, ok := s.codes[code]
	return ok
}

type tagFilter struct{ s *Subscription }

func (f tagFilter) MatchTagsCode(code int64) bool { return f.s.MatchCode(code) }

func (f tagFilter) MatchRecord(v message.View) bool {
	tag, ok := message.Property(v.Properties(), message.PropTags)
	if !ok {
		return false
	}
	_, ok = f.s.tags[string(tag)]
	return ok
}
