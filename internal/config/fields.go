package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// field describes one broker.conf key: how to parse it into a Broker and how
// to print the Broker's value back in the file's units.
type field struct {
	key     string
	aliases []string // other spellings RocketMQ versions used
	set     func(b *Broker, v string) error
	get     func(b *Broker) string
}

// fields lists every supported key, in the order docs/configuration.md
// lists them.
var fields = []field{
	str("brokerClusterName", func(b *Broker) *string { return &b.BrokerClusterName }),
	str("brokerName", func(b *Broker) *string { return &b.BrokerName }),
	int64f("brokerId", func(b *Broker) *int64 { return &b.BrokerID }),
	enum("brokerRole", func(b *Broker) *BrokerRole { return &b.BrokerRole }, AsyncMaster, SyncMaster, Slave),
	intf("brokerPermission", func(b *Broker) *int { return &b.BrokerPermission }),

	intf("listenPort", func(b *Broker) *int { return &b.ListenPort }),
	str("namesrvAddr", func(b *Broker) *string { return &b.NamesrvAddr }),
	str("brokerIP1", func(b *Broker) *string { return &b.BrokerIP1 }),
	intf("maxFrameBytes", func(b *Broker) *int { return &b.MaxFrameBytes }),
	str("httpListen", func(b *Broker) *string { return &b.HTTPListen }),
	str("httpToken", func(b *Broker) *string { return &b.HTTPToken }),
	int64f("maxInFlightRequestBytes", func(b *Broker) *int64 { return &b.MaxInFlightRequestBytes }),
	intf("maxConnections", func(b *Broker) *int { return &b.MaxConnections }),
	intf("maxConnectionsPerAddress", func(b *Broker) *int { return &b.MaxConnectionsPerAddress }),

	str("storePathRootDir", func(b *Broker) *string { return &b.StorePathRootDir }),
	str("storePathCommitLog", func(b *Broker) *string { return &b.StorePathCommitLog }),
	str("storePathConsumeQueue", func(b *Broker) *string { return &b.StorePathConsumeQueue }),
	str("storePathIndex", func(b *Broker) *string { return &b.StorePathIndex }),
	str("storeCheckpoint", func(b *Broker) *string { return &b.StoreCheckpoint }),
	str("abortFile", func(b *Broker) *string { return &b.AbortFile }),
	enum("flushDiskType", func(b *Broker) *FlushDiskType { return &b.FlushDiskType }, SyncFlush, AsyncFlush),
	dur("syncFlushTimeout", time.Millisecond, func(b *Broker) *time.Duration { return &b.SyncFlushTimeout }),
	dur("flushIntervalCommitLog", time.Millisecond, func(b *Broker) *time.Duration { return &b.FlushIntervalCommitLog }),
	dur("flushIntervalConsumeQueue", time.Millisecond, func(b *Broker) *time.Duration { return &b.FlushIntervalConsumeQueue }),
	dur("commitDelayMicros", time.Microsecond, func(b *Broker) *time.Duration { return &b.CommitDelay }),
	intf("commitSiblings", func(b *Broker) *int { return &b.CommitSiblings }),
	alias(int64f("mapedFileSizeCommitLog", func(b *Broker) *int64 { return &b.CommitLogSegmentBytes }), "mappedFileSizeCommitLog"),
	alias(cqSize("mapedFileSizeConsumeQueue"), "mappedFileSizeConsumeQueue"),
	dur("fileReservedTime", time.Hour, func(b *Broker) *time.Duration { return &b.FileReservedTime }),
	str("deleteWhen", func(b *Broker) *string { return &b.DeleteWhen }),
	intf("diskMaxUsedSpaceRatio", func(b *Broker) *int { return &b.DiskMaxUsedSpaceRatio }),
	alias(intf("diskSpaceWarningLevelRatio", func(b *Broker) *int { return &b.DiskHardLimitRatio }), "diskHardLimitRatio"),
	enum("diskPressureDelete", func(b *Broker) *DiskPressureDelete { return &b.DiskPressureDelete },
		PressureDeleteExpired, PressureDeleteConsumed, PressureDeleteUnconsumed),
	intf("maxMessageSize", func(b *Broker) *int { return &b.MaxMessageBytes }),
	int64f("commitLogPageCacheBytes", func(b *Broker) *int64 { return &b.CommitLogPageCacheBytes }),
	int64f("commitLogReadWindowBytes", func(b *Broker) *int64 { return &b.CommitLogReadWindowBytes }),
	int64f("scrubBytesPerSecond", func(b *Broker) *int64 { return &b.ScrubBytesPerSecond }),

	boolf("autoCreateTopicEnable", func(b *Broker) *bool { return &b.AutoCreateTopicEnable }),
	boolf("autoCreateSubscriptionGroup", func(b *Broker) *bool { return &b.AutoCreateSubscriptionGroup }),
	intf("defaultTopicQueueNums", func(b *Broker) *int { return &b.DefaultTopicQueueNums }),
	intf("maxReconsumeTimes", func(b *Broker) *int { return &b.MaxReconsumeTimes }),
	str("messageDelayLevel", func(b *Broker) *string { return &b.MessageDelayLevel }),
	boolf("longPollingEnable", func(b *Broker) *bool { return &b.LongPollingEnable }),
	dur("shortPollingTimeMills", time.Millisecond, func(b *Broker) *time.Duration { return &b.ShortPollingTime }),
	boolf("notifyConsumerIdsChangedEnable", func(b *Broker) *bool { return &b.NotifyConsumerIdsChangedEnable }),
	dur("channelExpiredTimeout", time.Millisecond, func(b *Broker) *time.Duration { return &b.ChannelExpiredTimeout }),
	dur("duplicationWindowSeconds", time.Second, func(b *Broker) *time.Duration { return &b.DuplicationWindow }),

	boolf("aclEnable", func(b *Broker) *bool { return &b.ACLEnable }),
	str("aclFile", func(b *Broker) *string { return &b.ACLFile }),
	alias(enum("tlsMode", func(b *Broker) *TLSMode { return &b.TLSMode }, TLSDisabled, TLSPermissive, TLSEnforcing), "tls.server.mode"),
	alias(str("tlsServerCertPath", func(b *Broker) *string { return &b.TLSServerCertPath }), "tls.server.certPath"),
	alias(str("tlsServerKeyPath", func(b *Broker) *string { return &b.TLSServerKeyPath }), "tls.server.keyPath"),
	alias(str("tlsServerTrustCertPath", func(b *Broker) *string { return &b.TLSServerTrustCertPath }), "tls.server.trustCertPath"),
	alias(enum("tlsServerNeedClientAuth", func(b *Broker) *TLSClientAuth { return &b.TLSServerNeedClientAuth },
		TLSClientAuthNone, TLSClientAuthOptional, TLSClientAuthRequire), "tls.server.need.client.auth"),
	alias(boolf("tlsEnable", func(b *Broker) *bool { return &b.TLSEnable }), "tls.enable"),
	alias(str("tlsClientTrustCertPath", func(b *Broker) *string { return &b.TLSClientTrustCertPath }), "tls.client.trustCertPath"),

	boolf("rejectTransactionMessage", func(b *Broker) *bool { return &b.RejectTransactionMessage }),
	dur("transactionTimeOut", time.Millisecond, func(b *Broker) *time.Duration { return &b.TransactionTimeout }),
	intf("transactionCheckMax", func(b *Broker) *int { return &b.TransactionCheckMax }),
	dur("transactionCheckInterval", time.Millisecond, func(b *Broker) *time.Duration { return &b.TransactionCheckInterval }),

	boolf("metricsRocketMQNames", func(b *Broker) *bool { return &b.MetricsRocketMQNames }),

	intf("haListenPort", func(b *Broker) *int { return &b.HAListenPort }),
	str("haMasterAddress", func(b *Broker) *string { return &b.HAMasterAddress }),
	str("haAdvertisedAddress", func(b *Broker) *string { return &b.HAAdvertisedAddress }),
	boolf("enableControllerMode", func(b *Broker) *bool { return &b.EnableControllerMode }),
	str("controllerAddr", func(b *Broker) *string { return &b.ControllerAddr }),
	intf("minInSyncReplicas", func(b *Broker) *int { return &b.MinInSyncReplicas }),
	dur("replicaAckTimeoutMillis", time.Millisecond, func(b *Broker) *time.Duration { return &b.ReplicaAckTimeout }),
	int64f("replicaCatchUpBytesPerSecond", func(b *Broker) *int64 { return &b.ReplicaCatchUpBytesPerSecond }),
	secret("haAuthSecret", func(b *Broker) *string { return &b.HAAuthSecret }),
	str("haAuthSecretFile", func(b *Broker) *string { return &b.HAAuthSecretFile }),
	str("haTLSTrustCertPath", func(b *Broker) *string { return &b.HATLSTrustCertPath }),
	boolf("slaveReadEnable", func(b *Broker) *bool { return &b.SlaveReadEnable }),
	str("amqpListen", func(b *Broker) *string { return &b.AMQPListen }),
	str("amqpsListen", func(b *Broker) *string { return &b.AMQPSListen }),
	str("amqpVhosts", func(b *Broker) *string { return &b.AMQPVhosts }),
	str("amqpPeerAccount", func(b *Broker) *string { return &b.AMQPPeerAccount }),
	dur("amqpConsumerTimeoutMillis", time.Millisecond, func(b *Broker) *time.Duration { return &b.AMQPConsumerTimeout }),
	intf("amqpMaxMessageSize", func(b *Broker) *int { return &b.AMQPMaxMessageBytes }),
	str("amqpManagementListen", func(b *Broker) *string { return &b.AMQPManagementListen }),
	str("kafkaListen", func(b *Broker) *string { return &b.KafkaListen }),
	str("kafkaAdvertisedListen", func(b *Broker) *string { return &b.KafkaAdvertisedListen }),
	str("kafkaBrokerRack", func(b *Broker) *string { return &b.KafkaBrokerRack }),
	int64f("kafkaNodeId", func(b *Broker) *int64 { return &b.KafkaNodeID }),
	dur("kafkaProducerIdExpirationMs", time.Millisecond, func(b *Broker) *time.Duration { return &b.KafkaProducerIDExpiration }),
	dur("kafkaGroupInitialRebalanceDelayMs", time.Millisecond, func(b *Broker) *time.Duration { return &b.KafkaGroupInitialRebalanceDelay }),
	dur("kafkaConsumerGroupSessionTimeoutMs", time.Millisecond, func(b *Broker) *time.Duration { return &b.KafkaConsumerGroupSessionTimeout }),
	dur("kafkaConsumerGroupHeartbeatIntervalMs", time.Millisecond, func(b *Broker) *time.Duration { return &b.KafkaConsumerGroupHeartbeatInterval }),
	dur("kafkaRetentionCheckIntervalMs", time.Millisecond, func(b *Broker) *time.Duration { return &b.KafkaRetentionCheckInterval }),
	dur("kafkaCompactionIntervalMs", time.Millisecond, func(b *Broker) *time.Duration { return &b.KafkaCompactionInterval }),
}

// byKey maps every key and alias to its field.
var byKey = func() map[string]*field {
	m := make(map[string]*field)
	for i := range fields {
		f := &fields[i]
		for _, k := range append([]string{f.key}, f.aliases...) {
			if m[k] != nil {
				panic("config: duplicate key " + k)
			}
			m[k] = f
		}
	}
	return m
}()

// Keys returns the canonical name of every supported broker.conf key.
func Keys() []string {
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.key
	}
	return keys
}

func alias(f field, names ...string) field {
	f.aliases = append(f.aliases, names...)
	return f
}

func str(key string, p func(*Broker) *string) field {
	return field{
		key: key,
		set: func(b *Broker, v string) error { *p(b) = v; return nil },
		get: func(b *Broker) string { return *p(b) },
	}
}

// secret is a string that is never printed back: an error about it (and
// anything else that prints the configuration) shows "(hidden)".
func secret(key string, p func(*Broker) *string) field {
	return field{
		key: key,
		set: func(b *Broker, v string) error { *p(b) = v; return nil },
		get: func(b *Broker) string {
			if *p(b) == "" {
				return ""
			}
			return "(hidden)"
		},
	}
}

// errNotInteger and friends are wrapped into ValueError.Err.
var (
	errNotInteger = errors.New("not a decimal integer")
	errNotBool    = errors.New(`not "true" or "false"`)
	errNegative   = errors.New("must not be negative")
	errTooLarge   = errors.New("too large")
)

func parseInt(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return 0, errTooLarge
		}
		return 0, errNotInteger
	}
	return n, nil
}

// parseCount parses a non-negative integer no larger than max.
func parseCount(v string, max int64) (int64, error) {
	n, err := parseInt(v)
	switch {
	case err != nil:
		return 0, err
	case n < 0:
		return 0, errNegative
	case n > max:
		return 0, errTooLarge
	}
	return n, nil
}

func int64f(key string, p func(*Broker) *int64) field {
	return field{
		key: key,
		set: func(b *Broker, v string) error {
			n, err := parseInt(v)
			if err == nil {
				*p(b) = n
			}
			return err
		},
		get: func(b *Broker) string { return strconv.FormatInt(*p(b), 10) },
	}
}

func intf(key string, p func(*Broker) *int) field {
	return field{
		key: key,
		set: func(b *Broker, v string) error {
			n, err := parseInt(v)
			if err != nil {
				return err
			}
			if n < math.MinInt32 || n > math.MaxInt32 {
				return errTooLarge // a Java int in RocketMQ
			}
			*p(b) = int(n)
			return nil
		},
		get: func(b *Broker) string { return strconv.Itoa(*p(b)) },
	}
}

// boolf accepts "true" and "false" in any case. (RocketMQ reads anything but
// "true" as false; a typo there should not silently turn a feature off.)
func boolf(key string, p func(*Broker) *bool) field {
	return field{
		key: key,
		set: func(b *Broker, v string) error {
			switch strings.ToLower(v) {
			case "true":
				*p(b) = true
			case "false":
				*p(b) = false
			default:
				return errNotBool
			}
			return nil
		},
		get: func(b *Broker) string { return strconv.FormatBool(*p(b)) },
	}
}

// dur is a duration written in the file as a non-negative integer count of
// unit.
func dur(key string, unit time.Duration, p func(*Broker) *time.Duration) field {
	return field{
		key: key,
		set: func(b *Broker, v string) error {
			n, err := parseCount(v, math.MaxInt64/int64(unit))
			if err != nil {
				return err
			}
			*p(b) = time.Duration(n) * unit
			return nil
		},
		get: func(b *Broker) string { return strconv.FormatInt(int64(*p(b)/unit), 10) },
	}
}

func enum[T ~string](key string, p func(*Broker) *T, values ...T) field {
	return field{
		key: key,
		set: func(b *Broker, v string) error {
			for _, x := range values {
				if string(x) == v {
					*p(b) = x
					return nil
				}
			}
			names := make([]string, len(values))
			for i, x := range values {
				names[i] = string(x)
			}
			return fmt.Errorf("must be one of %s", strings.Join(names, ", "))
		},
		get: func(b *Broker) string { return string(*p(b)) },
	}
}

// cqSize is mapedFileSizeConsumeQueue: a byte size in the file (RocketMQ's
// unit, 6000000 by default), ConsumeQueueSegmentEntries in the Broker. Like
// RocketMQ, a size that is not a multiple of the entry size is rounded up.
func cqSize(key string) field {
	return field{
		key: key,
		set: func(b *Broker, v string) error {
			n, err := parseCount(v, math.MaxInt32)
			if err != nil {
				return err
			}
			b.ConsumeQueueSegmentEntries = int((n + ConsumeQueueEntryBytes - 1) / ConsumeQueueEntryBytes)
			return nil
		},
		get: func(b *Broker) string {
			return strconv.FormatInt(int64(b.ConsumeQueueSegmentEntries)*ConsumeQueueEntryBytes, 10)
		},
	}
}
