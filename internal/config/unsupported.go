package config

import (
	"fmt"
	"strings"
)

// unsupported lists RocketMQ keys Keel knows and does not implement, with
// what to tell the user. A key listed with refuseTrue asks for a guarantee
// Keel cannot give (a replicated log); "true" there is an
// error rather than a warning, because running without it would be unsafe.
var unsupported = map[string]struct {
	hint       string
	refuseTrue bool
}{
	"enableDLegerCommitLog":             {"DLedger replication is not implemented", true},
	"brokerIP2":                         {"the replication address is the listen host; set --ha-listen or haListenPort", false},
	"sendMessageThreadPoolNums":         {"JVM thread pool tuning has no effect in Keel", false},
	"pullMessageThreadPoolNums":         {"JVM thread pool tuning has no effect in Keel", false},
	"useReentrantLockWhenPutMessage":    {"JVM lock tuning has no effect in Keel", false},
	"transientStorePoolEnable":          {"Keel does not use an off-heap write buffer", false},
	"warmMapedFileEnable":               {"Keel does not mmap segment files", false},
	"osPageCacheBusyTimeOutMills":       {"Keel has no page-cache busy check", false},
	"waitTimeMillsInSendQueue":          {"Keel has no send thread-pool queue", false},
	"diskSpaceCleanForciblyRatio":       {"use diskMaxUsedSpaceRatio", false},
	"cleanFileForciblyEnable":           {"use diskPressureDelete (unconsumed is RocketMQ's forced cleaning; the default keeps what groups have not consumed)", false},
	"enablePropertyFilter":              {"SQL92 filtering is not implemented; tag filtering is", false},
	"fastFailIfNoBufferInStoreQueue":    {"Keel has no store queue to fail fast from", false},
	"traceTopicEnable":                  {"message tracing is not implemented", false},
	"clusterTopicEnable":                {"cluster topics are not implemented", false},
	"brokerTopicEnable":                 {"broker topics are not implemented", false},
	"enableCalcFilterBitMap":            {"SQL92 filtering is not implemented", false},
	"flushCommitLogLeastPages":          {"Keel flushes everything written at each interval", false},
	"flushConsumeQueueLeastPages":       {"Keel flushes everything written at each interval", false},
	"flushCommitLogThoroughInterval":    {"Keel flushes everything written at each interval", false},
	"flushConsumeQueueThoroughInterval": {"Keel flushes everything written at each interval", false},
}

// checkUnsupported fails for an unsupported key whose value asks for a
// guarantee Keel cannot give.
func checkUnsupported(p Property, name string) error {
	u, ok := unsupported[p.Key]
	if ok && u.refuseTrue && strings.EqualFold(p.Value, "true") {
		return fmt.Errorf("config: %s:%d: %s=true: %s", name, p.Line, p.Key, u.hint)
	}
	return nil
}

// hint explains an unknown key: what Keel does instead, or the supported key
// it was probably meant to be (keys are case-sensitive, as in RocketMQ):
// the nearest by edit distance, ignoring case, if it is near enough.
func hint(key string) string {
	if u, ok := unsupported[key]; ok {
		return u.hint
	}
	if k := nearestKey(key); k != "" {
		return fmt.Sprintf("did you mean %q?", k)
	}
	return ""
}

// nearestKey returns the supported key (or alias) nearest to key, or "" if
// none is within maxTypoDistance(key). Ties go to the alphabetically first.
func nearestKey(key string) string {
	lower := strings.ToLower(key)
	best, bestDist := "", maxTypoDistance(key)+1
	for k := range byKey {
		d := editDistance(lower, strings.ToLower(k))
		if d < bestDist || (d == bestDist && k < best) {
			best, bestDist = k, d
		}
	}
	return best
}

// maxTypoDistance is how many edits a misspelling may be from the key it
// means: one for short keys, one more for every 8 characters, at most 3.
func maxTypoDistance(key string) int {
	return min(1+len(key)/8, 3)
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
