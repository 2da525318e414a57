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
	"enableControllerMode":              {"controller mode is not implemented yet", true},
	"brokerIP2":                         {"replication is not implemented yet", false},
	"haListenPort":                      {"replication is not implemented yet", false},
	"haMasterAddress":                   {"replication is not implemented yet", false},
	"slaveReadEnable":                   {"replication is not implemented yet", false},
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
// that differs only in case (keys are case-sensitive, as in RocketMQ).
func hint(key string) string {
	if u, ok := unsupported[key]; ok {
		return u.hint
	}
	for k := range byKey {
		if strings.EqualFold(k, key) {
			return fmt.Sprintf("did you mean %q?", k)
		}
	}
	return ""
}
