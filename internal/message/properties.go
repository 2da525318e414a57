package message

import (
	"slices"
	"strings"
)

// Separators of the properties string: name\x01value\x02name\x01value\x02...
const (
	NameValueSeparator = '\x01'
	PropertySeparator  = '\x02'
)

// Property keys (wire spelling).
const (
	PropKeys                           = "KEYS"
	PropTags                           = "TAGS"
	PropWaitStoreMsgOK                 = "WAIT"
	PropDelayLevel                     = "DELAY"
	PropRetryTopic                     = "RETRY_TOPIC"
	PropRealTopic                      = "REAL_TOPIC"
	PropRealQueueID                    = "REAL_QID"
	PropTransactionPrepared            = "TRAN_MSG"
	PropProducerGroup                  = "PGROUP"
	PropTransactionID                  = "__transactionId__"
	PropTransactionCheckTimes          = "TRANSACTION_CHECK_TIMES"
	PropCheckImmunitySeconds           = "CHECK_IMMUNITY_TIME_IN_SECONDS"
	PropUniqKey                        = "UNIQ_KEY"
	PropOriginMessageID                = "ORIGIN_MESSAGE_ID"
	PropReconsumeTime                  = "RECONSUME_TIME"
	PropMaxReconsumeTimes              = "MAX_RECONSUME_TIMES"
	PropCluster                        = "CLUSTER"
	PropMsgRegion                      = "MSG_REGION"
	PropTraceOn                        = "TRACE_ON"
	PropTimerDeliverMs                 = "TIMER_DELIVER_MS"
	PropTimerDelaySec                  = "TIMER_DELAY_SEC"
	PropTimerDelayMs                   = "TIMER_DELAY_MS"
	PropTimerOutMs                     = "TIMER_OUT_MS"
	PropTimerEnqueueMs                 = "TIMER_ENQUEUE_MS"
	PropCorrelationID                  = "CORRELATION_ID"
	PropReplyToClient                  = "REPLY_TO_CLIENT"
	PropMsgType                        = "MSG_TYPE"
	PropTransactionPreparedQueueOffset = "TRAN_PREPARED_QUEUE_OFFSET"
)

// The properties string is read the way the Go client reads it: split on
// \x02, keep the items that contain exactly one \x01, and let a later item
// override an earlier one with the same name. A missing trailing \x02 is
// accepted. Every function here follows that rule, so what Keel sees is what
// a consumer sees.

// nextItem returns the item of props starting at off, the offset of the
// following item, and the position of the item's only \x01 (-1 when the item
// has none or several, so it does not count).
func nextItem[T string | []byte](props T, off int) (item T, next, sep int) {
	end := off
	sep = -1
	seps := 0
	for end < len(props) && props[end] != PropertySeparator {
		if props[end] == NameValueSeparator {
			sep = end - off
			seps++
		}
		end++
	}
	if seps != 1 {
		sep = -1
	}
	return props[off:end], end + 1, sep
}

// equalName reports whether b equals s without converting either.
func equalName[T string | []byte](b T, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b[i] != s[i] {
			return false
		}
	}
	return true
}

// Property returns the value of key in an encoded properties string. When
// key occurs more than once the last value wins, as in the official clients.
// The result aliases props; it does not allocate.
func Property[T string | []byte](props T, key string) (T, bool) {
	var val T
	found := false
	for off := 0; off < len(props); {
		item, next, sep := nextItem(props, off)
		if sep >= 0 && equalName(item[:sep], key) {
			val, found = item[sep+1:], true
		}
		off = next
	}
	return val, found
}

// SetProperty returns props with key set to value, replacing every existing
// item named key and keeping all other items (well-formed or not) in order.
// \x01 and \x02 are removed from key and value, since they cannot be
// represented; use ValidPropertyText to reject such input instead.
func SetProperty(props, key, value string) string {
	key, value = cleanText(key), cleanText(value)
	var b strings.Builder
	b.Grow(len(props) + len(key) + len(value) + 3)
	writeWithout(&b, props, key)
	b.WriteString(key)
	b.WriteByte(NameValueSeparator)
	b.WriteString(value)
	b.WriteByte(PropertySeparator)
	return b.String()
}

// SetProperties returns props with each key of the pairs kv (key, value,
// key, value, ...) set to its value: the same string as calling SetProperty
// for each pair in turn, built with one allocation instead of one per pair.
// An odd trailing key is ignored; without pairs props is returned as it is.
func SetProperties(props string, kv ...string) string {
	kv = kv[:len(kv)&^1]
	if len(kv) == 0 {
		return props
	}
	var clean [8]string // cleaned pairs, for up to 4 pairs without allocating
	pairs := clean[:0]
	n := len(props)
	for i := 0; i < len(kv); i += 2 {
		k, v := cleanText(kv[i]), cleanText(kv[i+1])
		pairs = append(pairs, k, v)
		n += len(k) + len(v) + 2
	}
	var b strings.Builder
	b.Grow(n + 1)
	for off := 0; off < len(props); {
		item, next, sep := nextItem(props, off)
		off = next
		if item == "" || (sep >= 0 && isKeyOf(item[:sep], pairs, 0)) {
			continue
		}
		b.WriteString(item)
		b.WriteByte(PropertySeparator)
	}
	for i := 0; i < len(pairs); i += 2 {
		if isKeyOf(pairs[i], pairs, i+2) {
			continue // a later pair sets the same key
		}
		b.WriteString(pairs[i])
		b.WriteByte(NameValueSeparator)
		b.WriteString(pairs[i+1])
		b.WriteByte(PropertySeparator)
	}
	return b.String()
}

// isKeyOf reports whether name is the key of one of pairs[from:].
func isKeyOf(name string, pairs []string, from int) bool {
	for i := from; i < len(pairs); i += 2 {
		if pairs[i] == name {
			return true
		}
	}
	return false
}

// DeleteProperty returns props without any item named key. props is returned
// unchanged when it has no such item.
func DeleteProperty(props, key string) string {
	if _, ok := Property(props, key); !ok {
		return props
	}
	var b strings.Builder
	b.Grow(len(props))
	writeWithout(&b, props, key)
	return b.String()
}

// writeWithout writes every non-empty item of props except those named key,
// each followed by \x02.
func writeWithout(b *strings.Builder, props, key string) {
	for off := 0; off < len(props); {
		item, next, sep := nextItem(props, off)
		off = next
		if item == "" || (sep >= 0 && item[:sep] == key) {
			continue
		}
		b.WriteString(item)
		b.WriteByte(PropertySeparator)
	}
}

// ParseProperties decodes an encoded properties string; items without exactly
// one \x01 are skipped, as the official clients do.
func ParseProperties(props string) map[string]string {
	m := make(map[string]string)
	for off := 0; off < len(props); {
		item, next, sep := nextItem(props, off)
		if sep >= 0 {
			m[item[:sep]] = item[sep+1:]
		}
		off = next
	}
	return m
}

// EncodeProperties encodes m with keys sorted, each item ending in \x02.
// \x01 and \x02 are removed from names and values (see SetProperty).
func EncodeProperties(m map[string]string) string {
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(n)
	for _, k := range keys {
		b.WriteString(cleanText(k))
		b.WriteByte(NameValueSeparator)
		b.WriteString(cleanText(m[k]))
		b.WriteByte(PropertySeparator)
	}
	return b.String()
}

// ValidPropertyText reports whether s can be stored as a property name or
// value unchanged (it contains neither \x01 nor \x02).
func ValidPropertyText(s string) bool {
	return !strings.ContainsAny(s, "\x01\x02")
}

// cleanText removes the separator bytes from s and keeps every other byte,
// valid UTF-8 or not.
func cleanText(s string) string {
	if ValidPropertyText(s) {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != NameValueSeparator && s[i] != PropertySeparator {
			b = append(b, s[i])
		}
	}
	return string(b)
}
