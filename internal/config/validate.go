package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Limits checked by Validate.
const (
	// RecordOverheadBytes is the room a segment or frame needs beyond the
	// body: record header, topic, properties and end-of-segment marker.
	RecordOverheadBytes = 64 << 10
	MinFrameBytes       = 64 << 10
	MaxFrameBytesLimit  = 1 << 30
	MaxSegmentBytes     = 1<<31 - 1 // a Java int in RocketMQ
	MaxTopicQueueNums   = 1024
	MaxReconsumeLimit   = 10000
	MaxNameBytes        = 127
	// MinPageCacheBytes is the smallest CommitLog page-cache window: room
	// for what consumers at the head read just after it was flushed.
	MinPageCacheBytes = 64 << 20
	// MaxReadWindowBytes bounds the CommitLog's read window (memory).
	MaxReadWindowBytes = 1 << 30
	// MaxCommitDelay and MaxCommitSiblings bound commitDelayMicros and
	// commitSiblings.
	MaxCommitDelay    = 100 * time.Millisecond
	MaxCommitSiblings = 1000
)

// ErrUnsupported is wrapped by Validate errors for settings Keel recognises
// but does not implement yet.
var ErrUnsupported = errors.New("not supported yet")

// Validate checks every value's range and the relations between values. It
// reports all problems at once (errors.Join of *ValueError).
func (b *Broker) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, b.valueError(key, fmt.Errorf(format, args...)))
	}
	for _, check := range []func(func(string, string, ...any)){
		b.validateIdentity, b.validateNetwork, b.validateSecurity, b.validateStore, b.validateDelivery,
		b.validateKafka,
		b.validateAMQP,
	} {
		check(bad)
	}
	return errors.Join(errs...)
}

func (b *Broker) valueError(key string, err error) *ValueError {
	f := byKey[key]
	return &ValueError{Key: key, Value: f.get(b), Origin: b.origin[key], Err: err}
}

func (b *Broker) validateIdentity(bad func(string, string, ...any)) {
	checkName(bad, "brokerClusterName", b.BrokerClusterName)
	checkName(bad, "brokerName", b.BrokerName)
	switch b.BrokerRole {
	case AsyncMaster, SyncMaster:
		if b.BrokerID != 0 {
			bad("brokerId", "must be 0 for a master (brokerRole=%s)", b.BrokerRole)
		}
	case Slave:
		if b.BrokerID <= 0 {
			bad("brokerId", "must be above 0 for a slave (0 is the master)")
		}
	default:
		bad("brokerRole", "must be one of ASYNC_MASTER, SYNC_MASTER, SLAVE")
	}
	b.validateReplication(bad)
	if b.BrokerPermission < 0 || b.BrokerPermission > 7 {
		bad("brokerPermission", "must be a combination of 4 (read), 2 (write) and 1 (inherit)")
	}
}

// MaxReplicas bounds minInSyncReplicas: a group of a master and at most
// this many minus one slaves.
const MaxReplicas = 16

func (b *Broker) validateReplication(bad func(string, string, ...any)) {
	if b.HAListenPort < 0 || b.HAListenPort > 65535 {
		bad("haListenPort", "must be between 0 (listenPort+1) and 65535")
	}
	if a := b.HAMasterAddress; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("haMasterAddress", "not host:port")
		}
	}
	if a := b.HAAdvertisedAddress; a != "" {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" || port == "0" {
			bad("haAdvertisedAddress", "not host:port (a host and a port other than 0)")
		}
	}
	if b.EnableControllerMode {
		switch {
		case b.ControllerAddr == "":
			bad("controllerAddr", "enableControllerMode=true needs the controllers' addresses, host:port[;host:port]")
		case b.BrokerRole == Slave:
			// The role is the one the broker takes when elected; an
			// ASYNC_MASTER acknowledges only under the controllers' lease.
			bad("brokerRole", "enableControllerMode=true needs SYNC_MASTER or ASYNC_MASTER (the role the broker takes when elected), not SLAVE: the controller names the master")
		case b.HAMasterAddress != "":
			bad("haMasterAddress", "not used with enableControllerMode=true: the controller names the master")
		}
		for _, a := range b.ControllerAddrs() {
			if _, _, err := net.SplitHostPort(a); err != nil {
				bad("controllerAddr", "%q is not host:port", a)
			}
		}
	}
	if b.MinInSyncReplicas < 1 || b.MinInSyncReplicas > MaxReplicas {
		bad("minInSyncReplicas", "must be between 1 (the master alone) and %d", MaxReplicas)
	}
	checkDuration(bad, "replicaAckTimeoutMillis", b.ReplicaAckTimeout, time.Millisecond, 10*time.Minute)
	if b.ReplicaCatchUpBytesPerSecond < 0 {
		bad("replicaCatchUpBytesPerSecond", "must be 0 (no limit) or a rate in bytes per second")
	}
	switch {
	case b.HAAuthSecret != "" && b.HAAuthSecretFile != "":
		bad("haAuthSecretFile", "set together with haAuthSecret: keep one")
	case b.HAAuthSecret != "" && len(b.HAAuthSecret) < MinHASecretBytes:
		bad("haAuthSecret", "shorter than %d bytes: use a long random string (openssl rand -base64 32)", MinHASecretBytes)
	}
	if b.HATLSTrustCertPath != "" && !b.HATLSEnabled() {
		bad("haTLSTrustCertPath", "needs tlsMode permissive or enforcing: the replication link uses TLS only then")
	}
}

// MinHASecretBytes is the shortest haAuthSecret accepted.
const MinHASecretBytes = 16

func checkName(bad func(string, string, ...any), key, v string) {
	switch {
	case v == "":
		bad(key, "must not be empty")
	case len(v) > MaxNameBytes:
		bad(key, "longer than %d bytes", MaxNameBytes)
	case strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		bad(key, "must not contain spaces or control characters")
	}
}

func (b *Broker) validateNetwork(bad func(string, string, ...any)) {
	if b.ListenPort < 0 || b.ListenPort > 65535 {
		bad("listenPort", "must be between 0 and 65535")
	}
	for _, a := range b.NamesrvAddrs() {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("namesrvAddr", "%q is not host:port", a)
		}
	}
	if v := b.BrokerIP1; v != "" && net.ParseIP(v) == nil {
		bad("brokerIP1", "not an IP address (it is part of every message ID)")
	}
	if b.MaxFrameBytes < MinFrameBytes || b.MaxFrameBytes > MaxFrameBytesLimit {
		bad("maxFrameBytes", "must be between %d and %d", MinFrameBytes, MaxFrameBytesLimit)
	}
	b.validateNetLimits(bad)
	if b.HTTPListen != "" {
		if _, _, err := net.SplitHostPort(b.HTTPListen); err != nil {
			bad("httpListen", "not host:port")
		}
	}
	if b.AMQPListen != "" {
		if _, _, err := net.SplitHostPort(b.AMQPListen); err != nil {
			bad("amqpListen", "not host:port")
		}
	}
	if b.AMQPSListen != "" {
		if _, _, err := net.SplitHostPort(b.AMQPSListen); err != nil {
			bad("amqpsListen", "not host:port")
		}
		if b.TLSServerCertPath == "" || b.TLSServerKeyPath == "" {
			bad("amqpsListen", "needs tlsServerCertPath and tlsServerKeyPath (the certificate amqps serves)")
		}
	}
	if b.AMQPConsumerTimeout != 0 {
		checkDuration(bad, "amqpConsumerTimeoutMillis", b.AMQPConsumerTimeout, time.Second, 30*24*time.Hour)
	}
	seen := map[string]bool{"/": true}
	for _, v := range b.AMQPVhostList() {
		if seen[v] {
			bad("amqpVhosts", "%q listed twice (\"/\" is always served)", v)
		}
		seen[v] = true
	}
}

func (b *Broker) validateSecurity(bad func(string, string, ...any)) {
	if b.TLSMode != TLSDisabled {
		if b.TLSServerCertPath == "" {
			bad("tlsServerCertPath", "must be set when tlsMode=%s", b.TLSMode)
		}
		if b.TLSServerKeyPath == "" {
			bad("tlsServerKeyPath", "must be set when tlsMode=%s", b.TLSMode)
		}
	}
	if b.TLSServerNeedClientAuth != TLSClientAuthNone {
		if b.TLSMode == TLSDisabled {
			bad("tlsServerNeedClientAuth", "needs tlsMode permissive or enforcing")
		}
		if b.TLSServerTrustCertPath == "" {
			bad("tlsServerTrustCertPath", "must name the CA file that signs client certificates when tlsServerNeedClientAuth=%s", b.TLSServerNeedClientAuth)
		}
	}
}

// ACLPath is the ACL file: aclFile, else <storePathRootDir>/config/plain_acl.yml.
func (b *Broker) ACLPath() string {
	if b.ACLFile != "" {
		return b.ACLFile
	}
	return filepath.Join(b.StorePathRootDir, "config", "plain_acl.yml")
}

func (b *Broker) validateStore(bad func(string, string, ...any)) {
	if b.StorePathRootDir == "" {
		bad("storePathRootDir", "must not be empty")
	}
	for _, p := range b.storePaths() {
		if p.value != "" && !samePath(p.value, p.keel) {
			bad(p.key, "%w: Keel keeps the %s at %s, under storePathRootDir (remove the key or set it to that path)",
				ErrUnsupported, p.what, p.keel)
		}
	}
	if b.FlushDiskType != SyncFlush && b.FlushDiskType != AsyncFlush {
		bad("flushDiskType", "must be SYNC_FLUSH or ASYNC_FLUSH")
	}
	checkDuration(bad, "syncFlushTimeout", b.SyncFlushTimeout, time.Millisecond, 10*time.Minute)
	checkDuration(bad, "flushIntervalCommitLog", b.FlushIntervalCommitLog, time.Millisecond, time.Minute)
	checkDuration(bad, "flushIntervalConsumeQueue", b.FlushIntervalConsumeQueue, time.Millisecond, time.Minute)
	if b.CommitDelay < 0 || b.CommitDelay > MaxCommitDelay || b.CommitDelay >= b.SyncFlushTimeout {
		bad("commitDelayMicros", "must be 0 (no commit delay) or at most %d µs, and below syncFlushTimeout", MaxCommitDelay/time.Microsecond)
	}
	if b.CommitSiblings < 1 || b.CommitSiblings > MaxCommitSiblings {
		bad("commitSiblings", "must be between 1 and %d (puts)", MaxCommitSiblings)
	}
	minSeg := int64(b.MaxMessageBytes) + RecordOverheadBytes
	if b.CommitLogSegmentBytes < minSeg || b.CommitLogSegmentBytes > MaxSegmentBytes {
		bad("mapedFileSizeCommitLog", "must be between maxMessageSize+%d (%d) and %d", RecordOverheadBytes, minSeg, MaxSegmentBytes)
	}
	if b.ConsumeQueueSegmentEntries < 1 {
		bad("mapedFileSizeConsumeQueue", "must hold at least one %d-byte entry", ConsumeQueueEntryBytes)
	}
	checkDuration(bad, "fileReservedTime", b.FileReservedTime, time.Hour, 100_000*time.Hour)
	if _, err := b.DeleteHours(); err != nil {
		bad("deleteWhen", "%v", err)
	}
	if b.DiskMaxUsedSpaceRatio < 10 || b.DiskMaxUsedSpaceRatio > 95 {
		bad("diskMaxUsedSpaceRatio", "must be between 10 and 95 (percent)")
	}
	if b.DiskHardLimitRatio <= b.DiskMaxUsedSpaceRatio || b.DiskHardLimitRatio > 99 {
		bad("diskSpaceWarningLevelRatio", "must be above diskMaxUsedSpaceRatio (%d) and at most 99 (percent)", b.DiskMaxUsedSpaceRatio)
	}
	if b.CommitLogPageCacheBytes != 0 && b.CommitLogPageCacheBytes < MinPageCacheBytes {
		bad("commitLogPageCacheBytes", "must be 0 (the kernel manages the page cache) or at least %d", MinPageCacheBytes)
	}
	if b.CommitLogReadWindowBytes < 0 || b.CommitLogReadWindowBytes > MaxReadWindowBytes {
		bad("commitLogReadWindowBytes", "must be 0 (no read window) or a size in bytes of at most %d", MaxReadWindowBytes)
	}
	if b.ScrubBytesPerSecond < 0 {
		bad("scrubBytesPerSecond", "must be 0 (no background scrubbing) or a rate in bytes per second")
	}
	if b.MaxMessageBytes < 1 || b.MaxMessageBytes > b.MaxFrameBytes-RecordOverheadBytes {
		bad("maxMessageSize", "must be between 1 and maxFrameBytes-%d (%d)", RecordOverheadBytes, b.MaxFrameBytes-RecordOverheadBytes)
	}
}

func checkDuration(bad func(string, string, ...any), key string, d, min, max time.Duration) {
	if d < min || d > max {
		bad(key, "must be between %v and %v", min, max)
	}
}

func (b *Broker) validateDelivery(bad func(string, string, ...any)) {
	if b.DefaultTopicQueueNums < 1 || b.DefaultTopicQueueNums > MaxTopicQueueNums {
		bad("defaultTopicQueueNums", "must be between 1 and %d", MaxTopicQueueNums)
	}
	if b.MaxReconsumeTimes < 0 || b.MaxReconsumeTimes > MaxReconsumeLimit {
		bad("maxReconsumeTimes", "must be between 0 and %d", MaxReconsumeLimit)
	}
	if _, err := ParseDelayLevels(b.MessageDelayLevel); err != nil {
		bad("messageDelayLevel", "%v", strings.TrimPrefix(err.Error(), "config: messageDelayLevel: "))
	}
	checkDuration(bad, "shortPollingTimeMills", b.ShortPollingTime, time.Millisecond, time.Minute)
	checkDuration(bad, "channelExpiredTimeout", b.ChannelExpiredTimeout, time.Second, time.Hour)
	checkDuration(bad, "duplicationWindowSeconds", b.DuplicationWindow, 0, 24*time.Hour)
	checkDuration(bad, "transactionTimeOut", b.TransactionTimeout, time.Millisecond, 24*time.Hour)
	if b.TransactionCheckMax < 1 || b.TransactionCheckMax > 10000 {
		bad("transactionCheckMax", "must be between 1 and 10000")
	}
	checkDuration(bad, "transactionCheckInterval", b.TransactionCheckInterval, time.Millisecond, 24*time.Hour)
}

// NamesrvAddrs splits namesrvAddr ("a:9876;b:9876") into addresses.
func (b *Broker) NamesrvAddrs() []string {
	var out []string
	for _, a := range strings.Split(b.NamesrvAddr, ";") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// DeleteHours parses deleteWhen: hours of the day (0-23) separated by ';'.
func (b *Broker) DeleteHours() ([]int, error) {
	var hours []int
	for _, w := range strings.Split(b.DeleteWhen, ";") {
		w = strings.TrimSpace(w)
		h, err := strconv.Atoi(w)
		if err != nil || len(w) > 2 || strings.TrimLeft(w, "0123456789") != "" || h > 23 {
			return nil, fmt.Errorf("%q is not an hour 00-23", w)
		}
		hours = append(hours, h)
	}
	return hours, nil
}

// DelayLevels returns the parsed messageDelayLevel.
func (b *Broker) DelayLevels() ([]time.Duration, error) {
	return ParseDelayLevels(b.MessageDelayLevel)
}

// CommitLogDir is where the CommitLog segments live.
func (b *Broker) CommitLogDir() string {
	return filepath.Join(b.StorePathRootDir, "commitlog")
}

// storePath is a RocketMQ key that places one part of the store; Keel
// keeps every part at a fixed place under storePathRootDir.
type storePath struct {
	key, value, what, keel string
}

func (b *Broker) storePaths() []storePath {
	root := b.StorePathRootDir
	return []storePath{
		{"storePathCommitLog", b.StorePathCommitLog, "CommitLog", b.CommitLogDir()},
		{"storePathConsumeQueue", b.StorePathConsumeQueue, "ConsumeQueues", filepath.Join(root, "consumequeue")},
		{"storePathIndex", b.StorePathIndex, "IndexFiles", filepath.Join(root, "index")},
		{"storeCheckpoint", b.StoreCheckpoint, "checkpoint", filepath.Join(root, "checkpoint")},
		{"abortFile", b.AbortFile, "abort marker", filepath.Join(root, "abort")},
	}
}

func samePath(a, b string) bool {
	if x, err := filepath.Abs(a); err == nil {
		a = x
	}
	if x, err := filepath.Abs(b); err == nil {
		b = x
	}
	return a == b
}

// ControllerAddrs splits controllerAddr on ';'.
func (b *Broker) ControllerAddrs() []string {
	var out []string
	for _, a := range strings.Split(b.ControllerAddr, ";") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
