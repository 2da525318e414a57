package broker

// Subscriptions and the tag filter handed to the store on pull.
//
// A TAG expression is "*" / "" (everything) or tags joined by "||". Tag codes
// are recomputed here with message.TagsCode (Java String.hashCode) instead of
// trusting the client's codeSet: the Go client hashes UTF-8 bytes, Java
// UTF-16, and they differ for non-ASCII tags. The code is the coarse filter on
// ConsumeQueue entries; the record's real TAGS value confirms the match, so a
// hash collision never delivers a message of another tag. SQL92 expressions
// are not supported: pulls with them get SYSTEM_ERROR with RocketMQ's remark.

import (
	"strings"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

const errSQL92 = "The broker does not support consumer to filter message by SQL92"

type subscription struct {
	topic          string
	subString      string
	expressionType string
	subVersion     int64
	all            bool
	tags           map[string]struct{}
	codes          map[int64]struct{}
	err            error // set when the expression did not compile: pulls report it
}

// parseSubscription compiles a subscription expression.
func parseSubscription(topic, expr, exprType string, subVersion int64) (*subscription, error) {
	if exprType != "" && !strings.EqualFold(exprType, "TAG") {
		return nil, protoErrorf(remoting.ResSystemError, "%s", errSQL92)
	}
	s := &subscription{topic: topic, subString: expr, expressionType: "TAG", subVersion: subVersion}
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
		return nil, protoErrorf(remoting.ResSubscriptionParseFailed, "parse the consumer's subscription[%s] failed", expr)
	}
	return s, nil
}

// filter returns the store filter of s (nil = every message).
func (s *subscription) filter() store.Filter {
	if s == nil || s.all {
		return nil
	}
	return tagFilter{s}
}

// MatchCode implements core.TagsMatcher (a held pull's wake-up filter).
func (s *subscription) MatchCode(code int64) bool { return s.matchCode(code) }

// matchCode reports whether a ConsumeQueue tags code may match.
func (s *subscription) matchCode(code int64) bool {
	if s == nil || s.all {
		return true
	}
	_, ok := s.codes[code]
	return ok
}

type tagFilter struct{ s *subscription }

func (f tagFilter) MatchTagsCode(code int64) bool { return f.s.matchCode(code) }

func (f tagFilter) MatchRecord(v message.View) bool {
	tag, ok := message.Property(v.Properties(), message.PropTags)
	if !ok {
		return false
	}
	_, ok = f.s.tags[string(tag)]
	return ok
}
