package config

import (
	"time"
)

// FlushDiskType is the flushDiskType setting.
type FlushDiskType string

// Flush policies.
const (
	// SyncFlush acknowledges a write only after fdatasync covered it.
	SyncFlush FlushDiskType = "SYNC_FLUSH"
	// AsyncFlush acknowledges after the write reached the page cache; a
	// background flusher syncs every FlushIntervalCommitLog.
	AsyncFlush FlushDiskType = "ASYNC_FLUSH"
)

// BrokerRole is the brokerRole setting.
type BrokerRole string

// Broker roles (docs/replication.md).
const (
	AsyncMaster BrokerRole = "ASYNC_MASTER"
	SyncMaster  BrokerRole = "SYNC_MASTER"
	Slave       BrokerRole = "SLAVE"
)

// DiskPressureDelete is the diskPressureDelete setting: what retention may
// delete while disk use is above diskMaxUsedSpaceRatio.
type DiskPressureDelete string

// Disk pressure deletion policies.
const (
	// PressureDeleteExpired: only segments past fileReservedTime that every
	// consumer group has consumed.
	PressureDeleteExpired DiskPressureDelete = "expired"
	// PressureDeleteConsumed: segments every consumer group has consumed,
	// whatever their age.
	PressureDeleteConsumed DiskPressureDelete = "consumed"
	// PressureDeleteUnconsumed: the oldest segments even if some group has
	// not consumed them (RocketMQ's forced deletion), each logged at ERROR.
	PressureDeleteUnconsumed DiskPressureDelete = "unconsumed"
)

// TLSMode is the tlsMode setting (RocketMQ's tls.server.mode).
type TLSMode string

// TLS modes of the remoting listeners.
const (
	TLSDisabled   TLSMode = "disabled"   // plain TCP only
	TLSPermissive TLSMode = "permissive" // TLS and plain TCP on the same port
	TLSEnforcing  TLSMode = "enforcing"  // TLS only
)

// TLSClientAuth is the tlsServerNeedClientAuth setting.
type TLSClientAuth string

// Client certificate policies.
const (
	TLSClientAuthNone     TLSClientAuth = "none"
	TLSClientAuthOptional TLSClientAuth = "optional"
	TLSClientAuthRequire  TLSClientAuth = "require"
)

// ConsumeQueueEntryBytes is the size of one ConsumeQueue entry. RocketMQ's
// mapedFileSizeConsumeQueue is a byte size that is a multiple of it.
const ConsumeQueueEntryBytes = 20

// Defaults that other values are derived from.
const (
	DefaultMessageDelayLevel = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
	DefaultStorePathRootDir  = "./keel-data"
	// DefaultHTTPListen is loopback: the console shows message bodies.
	DefaultHTTPListen = "127.0.0.1:8080"
	// DefaultAMQPListen is loopback: out of the box the only AMQP account
	// is guest, which RabbitMQ's rule limits to loopback clients.
	DefaultAMQPListen = "127.0.0.1:5672"
)

// Broker is the broker configuration: one field per supported broker.conf
// key (docs/configuration.md lists them with their meaning). Field values are
// Go-typed; the file's units (milliseconds, hours, bytes) are converted on
// Set. The zero value is not useful: start from Default.
type Broker struct {
	// Identity and role.
	BrokerClusterName string     // brokerClusterName
	BrokerName        string     // brokerName
	BrokerID          int64      // brokerId; 0 is the master
	BrokerRole        BrokerRole // brokerRole
	BrokerPermission  int        // brokerPermission: 4 read | 2 write | 1 inherit

	// Network.
	ListenPort    int    // listenPort (the --broker-listen flag overrides)
	NamesrvAddr   string // namesrvAddr: "host:port;host:port"
	BrokerIP1     string // brokerIP1: advertised address; empty = derived
	MaxFrameBytes int    // maxFrameBytes (Keel): largest remoting frame
	HTTPListen    string // httpListen (Keel): metrics/console address; empty = off
	HTTPToken     string // httpToken (Keel): required by the HTTP endpoint if set
	// Bounds on what the network can make the broker hold (netlimit.go).
	MaxInFlightRequestBytes  int64 // maxInFlightRequestBytes (Keel): broker-wide budget of request bytes being read and decoded
	MaxConnections           int   // maxConnections (Keel): open connections per listener
	MaxConnectionsPerAddress int   // maxConnectionsPerAddress (Keel): open connections per listener from one IP address

	// Store.
	StorePathRootDir           string             // storePathRootDir
	StorePathCommitLog         string             // storePathCommitLog: must be <root>/commitlog if set
	StorePathConsumeQueue      string             // storePathConsumeQueue: must be <root>/consumequeue if set
	StorePathIndex             string             // storePathIndex: must be <root>/index if set
	StoreCheckpoint            string             // storeCheckpoint: must be <root>/checkpoint if set
	AbortFile                  string             // abortFile: must be <root>/abort if set
	FlushDiskType              FlushDiskType      // flushDiskType
	SyncFlushTimeout           time.Duration      // syncFlushTimeout (ms)
	FlushIntervalCommitLog     time.Duration      // flushIntervalCommitLog (ms)
	FlushIntervalConsumeQueue  time.Duration      // flushIntervalConsumeQueue (ms)
	CommitDelay                time.Duration      // commitDelayMicros (Keel, µs); 0 = none
	CommitSiblings             int                // commitSiblings (Keel)
	CommitLogSegmentBytes      int64              // mapedFileSizeCommitLog (bytes)
	ConsumeQueueSegmentEntries int                // mapedFileSizeConsumeQueue (bytes in the file, entries here)
	FileReservedTime           time.Duration      // fileReservedTime (hours)
	DeleteWhen                 string             // deleteWhen: hours "04" or "04;16"
	DiskMaxUsedSpaceRatio      int                // diskMaxUsedSpaceRatio (%): delete old files at once
	DiskHardLimitRatio         int                // diskSpaceWarningLevelRatio (%): refuse writes
	DiskPressureDelete         DiskPressureDelete // diskPressureDelete (Keel): what disk pressure may delete
	MaxMessageBytes            int                // maxMessageSize (bytes, body)
	CommitLogPageCacheBytes    int64              // commitLogPageCacheBytes (Keel, bytes); 0 = the kernel decides
	CommitLogReadWindowBytes   int64              // commitLogReadWindowBytes (Keel, bytes); 0 = none
	ScrubBytesPerSecond        int64              // scrubBytesPerSecond (Keel, bytes/s); 0 = no background scrubbing

	// Topics, groups, delivery.
	AutoCreateTopicEnable          bool          // autoCreateTopicEnable
	AutoCreateSubscriptionGroup    bool          // autoCreateSubscriptionGroup
	DefaultTopicQueueNums          int           // defaultTopicQueueNums
	MaxReconsumeTimes              int           // maxReconsumeTimes (Keel): retryMaxTimes of auto-created groups
	MessageDelayLevel              string        // messageDelayLevel
	LongPollingEnable              bool          // longPollingEnable
	ShortPollingTime               time.Duration // shortPollingTimeMills (ms)
	NotifyConsumerIdsChangedEnable bool          // notifyConsumerIdsChangedEnable
	ChannelExpiredTimeout          time.Duration // channelExpiredTimeout (ms)
	DuplicationWindow              time.Duration // duplicationWindowSeconds (Keel, s); 0 = off

	// Security.
	ACLEnable               bool          // aclEnable: check requests against the ACL file
	ACLFile                 string        // aclFile (Keel): empty = <storePathRootDir>/config/plain_acl.yml
	TLSMode                 TLSMode       // tlsMode (Keel; RocketMQ tls.server.mode)
	TLSServerCertPath       string        // tlsServerCertPath (tls.server.certPath)
	TLSServerKeyPath        string        // tlsServerKeyPath (tls.server.keyPath)
	TLSServerTrustCertPath  string        // tlsServerTrustCertPath (tls.server.trustCertPath)
	TLSServerNeedClientAuth TLSClientAuth // tlsServerNeedClientAuth (tls.server.need.client.auth)
	// TLSEnable (tlsEnable, RocketMQ's tls.enable): this member dials the
	// other broker groups' masters (Kafka forwards, AMQP doors) over TLS;
	// always so under tlsMode=enforcing (PeersTLS).
	TLSEnable bool
	// TLSClientTrustCertPath (tlsClientTrustCertPath, tls.client.trustCertPath):
	// the CA bundle that signs the other members' certificates, checked
	// when this member dials them over TLS; empty: the system's roots and
	// the dialled host.
	TLSClientTrustCertPath string

	// Transactions.
	RejectTransactionMessage bool          // rejectTransactionMessage
	TransactionTimeout       time.Duration // transactionTimeOut (ms)
	TransactionCheckMax      int           // transactionCheckMax
	TransactionCheckInterval time.Duration // transactionCheckInterval (ms)

	// Metrics.
	MetricsRocketMQNames bool // metricsRocketMQNames (Keel): add rocketmq-exporter's names to /metrics

	// Replication (docs/replication.md).
	HAListenPort    int    // haListenPort: the replication port; 0 = listenPort+1 (the --ha-listen flag overrides)
	HAMasterAddress string // haMasterAddress: a slave's master HA address "host:port"
	// haAdvertisedAddress (Keel): the replication address "host:port" this
	// broker names to the NameServers and the controllers when its
	// replicas reach its HA listener through another address (a port
	// mapping, a proxy); empty: the listener's own.
	HAAdvertisedAddress string
	// enableControllerMode: the broker's role comes from the controllers
	// at controllerAddr (host:port[;host:port]), not from brokerRole and
	// brokerId (docs/replication.md#controller).
	EnableControllerMode bool
	ControllerAddr       string
	MinInSyncReplicas    int           // minInSyncReplicas: copies (the master's included) SYNC_MASTER needs to accept a send
	ReplicaAckTimeout    time.Duration // replicaAckTimeoutMillis (Keel, ms): how long SYNC_MASTER waits for the slaves' acks
	SlaveReadEnable      bool          // slaveReadEnable: pull responses may suggest a slave (consumers far behind)
	// replicaCatchUpBytesPerSecond (Keel): the rate a master sends old data
	// to a slave far behind (0 = as fast as the slave takes it).
	ReplicaCatchUpBytesPerSecond int64
	// HAAuthSecret (haAuthSecret, Keel): the group's shared secret, which
	// the master and its slaves prove to each other before replicating;
	// HAAuthSecretFile (haAuthSecretFile) names a file holding it instead.
	HAAuthSecret     string
	HAAuthSecretFile string
	// HATLSTrustCertPath (haTLSTrustCertPath, Keel): the CA bundle that
	// signs the group members' certificates; set, the replication link
	// (TLS when tlsMode is on) is mutual TLS.
	HATLSTrustCertPath string
	// AMQP 0-9-1.
	AMQPListen string // amqpListen (Keel): AMQP listener address; empty = off
	// AMQPSListen (amqpsListen, Keel): AMQP over TLS (amqps) listener
	// address, with tlsServerCertPath / tlsServerKeyPath; empty = off.
	AMQPSListen string
	// AMQPPeerAccount (amqpPeerAccount, Keel): the plain_acl.yml account
	// (an accessKey) an AMQP door logs in to other broker groups' doors as
	// for what no client connection carries (dead-letter copies); empty:
	// guest, which another door takes from loopback only and never under
	// aclEnable=true.
	AMQPPeerAccount string
	// AMQPVhosts (amqpVhosts, Keel): the AMQP virtual hosts served besides
	// "/", separated by ';'.
	AMQPVhosts string
	// AMQPConsumerTimeout (amqpConsumerTimeoutMillis, Keel, ms): how long an
	// AMQP delivery may wait for its ack before its channel is closed
	// (RabbitMQ's consumer_timeout); 0 = never.
	AMQPConsumerTimeout time.Duration
	// AMQPMaxMessageBytes (amqpMaxMessageSize, Keel, bytes): the largest
	// AMQP message body (RabbitMQ's max_message_size); see AMQPMaxMessage.
	AMQPMaxMessageBytes int
	// AMQPManagementListen (amqpManagementListen, Keel): the address of
	// the read-only subset of RabbitMQ's management HTTP API over the
	// AMQP door; empty (the default) = off.
	AMQPManagementListen string
	// Kafka front door (kafka.go).
	KafkaListen           string // kafkaListen (Keel): Kafka listener address; empty = off
	KafkaAdvertisedListen string // kafkaAdvertisedListen (Keel): host:port Metadata gives clients
	// KafkaBrokerRack (kafkaBrokerRack, Keel): the member's rack (Kafka's
	// broker.rack), in Metadata; a consumer with the same client.rack
	// reads from it (follower fetching). Empty: none.
	KafkaBrokerRack string
	// KafkaNodeID (kafkaNodeId, Keel): the broker's Kafka node id, unique
	// in the cluster; -1 (the default) is the brokerId. See KafkaNode.
	KafkaNodeID int64
	// kafkaProducerIdExpirationMs (Keel, ms): an idempotent producer idle
	// this long in a partition is forgotten there (Kafka's
	// producer.id.expiration.ms)
	KafkaProducerIDExpiration time.Duration
	// kafkaGroupInitialRebalanceDelayMs (Keel, ms): how long the first
	// rebalance of an empty consumer group waits for more members
	// (Kafka's group.initial.rebalance.delay.ms); 0 = not at all
	KafkaGroupInitialRebalanceDelay time.Duration
	// kafkaConsumerGroupSessionTimeoutMs and
	// kafkaConsumerGroupHeartbeatIntervalMs (Keel, ms): a KIP-848
	// consumer group member's session timeout and the heartbeat interval
	// it is told (Kafka's group.consumer.session.timeout.ms and
	// group.consumer.heartbeat.interval.ms)
	KafkaConsumerGroupSessionTimeout, KafkaConsumerGroupHeartbeatInterval time.Duration
	// kafkaRetentionCheckIntervalMs (Keel, ms): how often topics'
	// retention.ms and retention.bytes are applied (Kafka's
	// log.retention.check.interval.ms)
	KafkaRetentionCheckInterval time.Duration
	// kafkaCompactionIntervalMs (Keel, ms): how often compacted Kafka
	// topics are cleaned (Kafka's log.cleaner.backoff.ms)
	KafkaCompactionInterval time.Duration

	// origin records where each key was last set ("broker.conf:12",
	// "--data-dir"), for error messages.
	origin map[string]string
}

// Default returns Keel's embedded default configuration.
//
// It differs from RocketMQ's defaults in one deliberate place: flushDiskType
// is SYNC_FLUSH, because Keel's first promise is that an acknowledged message
// is never lost, and a broker started with no configuration should keep it.
// RocketMQ defaults to ASYNC_FLUSH, which can lose up to one flush interval
// of acknowledged messages on power loss; set it explicitly to trade that for
// latency.
// DefaultScrubBytesPerSecond is the scrubber's default rate: a 100 GiB
// CommitLog is re-verified about every seven hours, a small share of what
// a disk reads sequentially.
const DefaultScrubBytesPerSecond = 4 << 20

// DefaultCommitLogReadWindowBytes is how many of the CommitLog's newest
// bytes are kept in memory for the reads of consumers keeping up: as much
// as the smallest page-cache window (MinPageCacheBytes), a few seconds of
// a busy broker's writes.
const DefaultCommitLogReadWindowBytes = 64 << 20

func Default() *Broker {
	return &Broker{
		BrokerClusterName: "DefaultCluster",
		BrokerName:        "broker-a",
		BrokerID:          0,
		BrokerRole:        AsyncMaster,
		BrokerPermission:  6,

		ListenPort:    10911,
		MaxFrameBytes: 16 << 20,
		HTTPListen:    DefaultHTTPListen,

		MaxInFlightRequestBytes:  DefaultMaxInFlightRequestBytes,
		MaxConnections:           DefaultMaxConnections,
		MaxConnectionsPerAddress: DefaultMaxConnectionsPerAddress,

		AMQPListen:  DefaultAMQPListen,
		KafkaListen: DefaultKafkaListen,

		AMQPMaxMessageBytes:             DefaultAMQPMaxMessageBytes,
		KafkaProducerIDExpiration:       24 * time.Hour,
		KafkaNodeID:                     -1,
		KafkaGroupInitialRebalanceDelay: 3 * time.Second,
		KafkaRetentionCheckInterval:     5 * time.Minute,
		KafkaCompactionInterval:         15 * time.Second,

		KafkaConsumerGroupSessionTimeout: 45 * time.Second, KafkaConsumerGroupHeartbeatInterval: 5 * time.Second,

		StorePathRootDir:           DefaultStorePathRootDir,
		FlushDiskType:              SyncFlush,
		SyncFlushTimeout:           5 * time.Second,
		FlushIntervalCommitLog:     500 * time.Millisecond,
		FlushIntervalConsumeQueue:  time.Second,
		CommitSiblings:             8,
		CommitLogSegmentBytes:      1 << 30,
		ConsumeQueueSegmentEntries: 300_000,
		FileReservedTime:           72 * time.Hour,
		DeleteWhen:                 "04",
		DiskMaxUsedSpaceRatio:      75,
		DiskHardLimitRatio:         90,
		DiskPressureDelete:         PressureDeleteExpired,
		MaxMessageBytes:            4 << 20,
		ScrubBytesPerSecond:        DefaultScrubBytesPerSecond,
		CommitLogReadWindowBytes:   DefaultCommitLogReadWindowBytes,

		AutoCreateTopicEnable:          true,
		AutoCreateSubscriptionGroup:    true,
		DefaultTopicQueueNums:          4,
		MaxReconsumeTimes:              16,
		MessageDelayLevel:              DefaultMessageDelayLevel,
		LongPollingEnable:              true,
		ShortPollingTime:               time.Second,
		NotifyConsumerIdsChangedEnable: true,
		ChannelExpiredTimeout:          120 * time.Second,
		DuplicationWindow:              120 * time.Second,

		TLSMode:                 TLSDisabled,
		TLSServerNeedClientAuth: TLSClientAuthNone,

		RejectTransactionMessage: false,
		TransactionTimeout:       6 * time.Second,
		TransactionCheckMax:      15,
		TransactionCheckInterval: 60 * time.Second,

		MinInSyncReplicas: 2,
		ReplicaAckTimeout: 2 * time.Second,

		AMQPConsumerTimeout: 30 * time.Minute,
	}
}

// HAPort is the replication port: haListenPort, else listenPort+1 (as in
// RocketMQ).
func (b *Broker) HAPort() int {
	if b.HAListenPort != 0 {
		return b.HAListenPort
	}
	return b.ListenPort + 1
}

// HAProtected reports whether the replication link authenticates its
// peer: a shared secret, or mutual TLS (tlsMode on and haTLSTrustCertPath).
func (b *Broker) HAProtected() bool {
	return b.HAAuthSecret != "" || b.HAAuthSecretFile != "" || (b.HATLSEnabled() && b.HATLSTrustCertPath != "")
}

// PeersTLS reports whether this member dials the other groups' masters
// over TLS: tlsEnable, or tlsMode=enforcing (the cluster's members are
// then taken to serve TLS only too), as RocketMQ's tls.enable defaults.
func (b *Broker) PeersTLS() bool { return b.TLSEnable || b.TLSMode == TLSEnforcing }

// HATLSEnabled reports whether the replication link runs over TLS: when
// tlsMode is permissive or enforcing (the link itself is TLS only).
func (b *Broker) HATLSEnabled() bool { return b.TLSMode != TLSDisabled }

// Replicated reports whether the broker is part of a replicated group
// (a SYNC_MASTER or a SLAVE; an ASYNC_MASTER serves slaves that connect but
// waits for none).
func (b *Broker) Replicated() bool { return b.BrokerRole != AsyncMaster }
