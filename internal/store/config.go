package store

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// FlushDiskType is RocketMQ's flushDiskType.
type FlushDiskType int

// Flush policies.
const (
	// AsyncFlush acknowledges after the write to the page cache; a
	// background flusher syncs every FlushInterval. Acknowledged messages
	// written after the last completed sync are lost on power loss (at most
	// about one FlushInterval of writes).
	AsyncFlush FlushDiskType = iota
	// SyncFlush acknowledges only after an fdatasync covered the message.
	SyncFlush
)

func (t FlushDiskType) String() string {
	if t == SyncFlush {
		return "SYNC_FLUSH"
	}
	return "ASYNC_FLUSH"
}

// Defaults.
const (
	DefaultCommitLogSegmentBytes     = 1 << 30
	DefaultConsumeQueueEntries       = 300_000
	DefaultSyncFlushTimeout          = 5 * time.Second
	DefaultFlushInterval             = 500 * time.Millisecond
	DefaultFlushConsumeQueueInterval = time.Second
	DefaultFileReservedTime          = 72 * time.Hour
	DefaultDeleteWhen                = "04"
	DefaultDiskMaxUsedSpaceRatio     = 75
	DefaultDiskHardLimitRatio        = 90
	DefaultRetentionCheckInterval    = 10 * time.Second
	DefaultMaxMessageBytes           = 4 << 20
	DefaultIndexHashSlots            = 5_000_000
	DefaultIndexMaxEntries           = 20_000_000
	DefaultMaxScanEntries            = 16_000
	DefaultGroupCommitDelay          = 200 * time.Microsecond
	DefaultCommitSiblings            = 8
	DefaultPrefillBytes              = 16 << 20
	DefaultReadWindowBytes           = 64 << 20
	DefaultDiskReserveBytes          = 16 << 20
)

// PressureDelete says what retention may delete while disk use is above
// DiskMaxUsedSpaceRatio (before DeleteWhen, or before FileReservedTime).
// See retention.go.
type PressureDelete int

// Pressure deletion policies.
const (
	// PressureDeleteExpired deletes only segments older than
	// FileReservedTime whose messages every consumer group has consumed:
	// nothing a group still needs, and nothing younger than the retention
	// promise, is deleted early; the store refuses writes at the hard limit
	// instead.
	PressureDeleteExpired PressureDelete = iota
	// PressureDeleteConsumed deletes segments whose messages every group
	// has consumed, whatever their age.
	PressureDeleteConsumed
	// PressureDeleteUnconsumed deletes the oldest segments even when they
	// hold messages a group has not consumed (RocketMQ's forced deletion);
	// every such deletion is logged at ERROR with what it cost and counted
	// (Stats.UnconsumedDeleted).
	PressureDeleteUnconsumed
)

func (p PressureDelete) String() string {
	switch p {
	case PressureDeleteConsumed:
		return "consumed"
	case PressureDeleteUnconsumed:
		return "unconsumed"
	}
	return "expired"
}

// Config configures a Store. DefaultConfig fills every field.
type Config struct {
	Dir           string
	FS            vfs.FS
	FlushDiskType FlushDiskType

	CommitLogSegmentBytes      int64 // mapedFileSizeCommitLog
	ConsumeQueueSegmentEntries int   // mapedFileSizeConsumeQueue / 20

	SyncFlushTimeout time.Duration // SYNC_FLUSH: result FLUSH_DISK_TIMEOUT after this
	FlushInterval    time.Duration // ASYNC_FLUSH: CommitLog flush period
	// FlushConsumeQueueInterval is how often ConsumeQueues and the index
	// are flushed and the checkpoint written.
	FlushConsumeQueueInterval time.Duration

	FileReservedTime      time.Duration // delete CommitLog segments older than this
	DeleteWhen            string        // hours of day (local time of Now) to delete, "04" or "04;05"
	DiskMaxUsedSpaceRatio int           // percent: above it delete old segments at once
	DiskHardLimitRatio    int           // percent: above it refuse writes (PutDiskFull); 100: until ENOSPC
	// DiskReserveBytes is the least space writes leave free for dispatch,
	// the checkpoint and the broker's metadata, on top of the prefill
	// window and an index slot table (see space.go); the space above
	// DiskHardLimitRatio counts when it is larger.
	DiskReserveBytes int64
	// DiskPressureDelete is what may be deleted above DiskMaxUsedSpaceRatio.
	DiskPressureDelete     PressureDelete
	RetentionCheckInterval time.Duration // how often disk use and retention are checked

	MaxMessageBytes int // body limit (maxMessageSize)
	// MaxRecordBodyBytes, when above MaxMessageBytes, is the body limit of
	// records put whole (PutRecord: the AMQP door's messages, up to its
	// max message size); messages put with PutMessage(s) keep
	// MaxMessageBytes. 0: MaxMessageBytes.
	MaxRecordBodyBytes int
	MaxScanEntries     int // ConsumeQueue entries one GetMessage inspects at most

	IndexHashSlots, IndexMaxEntries int

	// TagsCode computes the ConsumeQueue tag code of a record, given its
	// TAGS property (nil when absent; the broker uses it for
	// SCHEDULE_TOPIC_XXXX). Nil: the hash of the TAGS property.
	TagsCode func(v message.View, tags []byte) int64

	// IndexKeys, if set, names the index keys of a record of a type other
	// than RocketMQ's (the store does not read those types' bodies): it
	// calls key with each (valid only during the call). The dispatcher
	// indexes each under "topic#key" for every destination topic of the
	// record, as a RocketMQ message's KEYS. An error (a body that does not
	// decode, or would cost too much to) is logged and the record
	// dispatched with the keys named before it. Nil: such records have no index keys.
	IndexKeys func(rec []byte, key func([]byte)) error

	// RepairCorruption lets Open repair corruption found in the middle of
	// the CommitLog instead of refusing to open: the damaged bytes, up to
	// the next valid entry, are copied to <Dir>/quarantine and replaced by
	// a hole record; every record that verifies is kept. It also lets Open
	// cut a tail before the checkpointed flushed offset (after a copy).
	RepairCorruption bool

	// GroupCommitDelay bounds how long a SYNC_FLUSH fdatasync waits for
	// puts already being encoded or appended, and for as many puts as the
	// previous fdatasync took, so that they share it instead of needing
	// the next one (0: DefaultGroupCommitDelay; negative: never wait). A
	// lone writer's put is flushed at once: the wait happens only while
	// other puts are in progress or the previous flush took several.
	GroupCommitDelay time.Duration

	// CommitDelay, if > 0, is how long a SYNC_FLUSH fdatasync that a put
	// asked for waits before it starts when the previous one took at least
	// CommitSiblings puts (0: DefaultCommitSiblings), so that the puts
	// arriving meanwhile share it: fewer, larger commits under many
	// concurrent writers, each of their acknowledgements later by up to
	// CommitDelay. A lone writer's flushes take one put each and never
	// wait. 0 (the default): no such wait. The wait comes before
	// GroupCommitDelay's.
	CommitDelay    time.Duration
	CommitSiblings int

	// PrefillBytes is how far ahead of the writer the CommitLog segment
	// being written is kept zero-filled and synced, so that a SYNC_FLUSH
	// fdatasync writes data only, not a new file size and block allocation
	// (0: DefaultPrefillBytes under SYNC_FLUSH, none under ASYNC_FLUSH;
	// negative: never). See commitlog/prefill.go.
	PrefillBytes int64

	// CommitLogCacheBytes is how much of the CommitLog behind the flushed
	// offset keeps its page cache; the pages of older bytes are released
	// (0: the kernel decides, as for any file). See commitlog/cache.go.
	CommitLogCacheBytes int64

	// ReadWindowBytes is how many of the CommitLog's most recently written
	// bytes are also kept in memory, so that reads of them (consumers
	// keeping up, replication; not the dispatcher, which reads the file) are copies rather than
	// preads (0: DefaultReadWindowBytes; negative: none). See
	// commitlog/window.go.
	ReadWindowBytes int64

	// ScrubBytesPerSecond bounds how fast the background scrubber re-reads
	// the store at rest to verify it (scrub.go): CommitLog records,
	// ConsumeQueue entries, index files. 0 (the zero value) turns it off.
	ScrubBytesPerSecond int64
	// ScrubPassInterval is how long after a scrub pass started the next
	// may start (0: DefaultScrubPassInterval; negative: at once).
	ScrubPassInterval time.Duration
	// ScrubTicker, if set, replaces the scrubber's 100 ms ticker (tests
	// drive it with Now): it returns the tick channel and a stop function.
	// With it the scrubber never parks between passes.
	ScrubTicker func() (<-chan time.Time, func())

	// OnFlush, if set, is called after each successful CommitLog fdatasync
	// round that made bytes > 0 durable, with the round's duration (the
	// group-commit batch size is bytes). It must be cheap and never block.
	OnFlush func(d time.Duration, bytes int64)

	// ExternalReplication makes the Replicated watermark a stage of its
	// own, moved by a replication service through AdvanceReplicated
	// (never past Flushed); under SYNC_FLUSH puts are then acknowledged,
	// and records shown, only once it passes them. Unset, Replicated is
	// Flushed (no replicas are required).
	ExternalReplication bool

	// ReplicationTimeout, with ExternalReplication, bounds a put's wait
	// for Confirmed instead of SyncFlushTimeout (0: SyncFlushTimeout); a
	// put whose local part is done when it passes gets
	// PutFlushSlaveTimeout.
	ReplicationTimeout time.Duration

	// Replica makes the store a replica's: every put is refused
	// (PutServiceNotAvailable, ErrReplica) and the CommitLog grows only
	// through AppendReplicated (replica.go). Its Confirmed watermark is
	// moved by the replication service (AdvanceReplicated: what the
	// master confirmed), so a replica shows only what its master
	// confirmed, and TruncateReplica never takes back what it showed.
	Replica bool

	// TruncateFailpoint, if set, is called after each durable step of
	// TruncateReplica (TruncateStepIntent, ...): crash tests snapshot the
	// filesystem there.
	TruncateFailpoint func(step string)

	Logger *slog.Logger
	Now    func() time.Time
}

// DefaultConfig returns the defaults for a store in dir on the real
// filesystem.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:                        dir,
		FS:                         vfs.OS{},
		FlushDiskType:              AsyncFlush,
		CommitLogSegmentBytes:      DefaultCommitLogSegmentBytes,
		ConsumeQueueSegmentEntries: DefaultConsumeQueueEntries,
		SyncFlushTimeout:           DefaultSyncFlushTimeout,
		FlushInterval:              DefaultFlushInterval,
		FlushConsumeQueueInterval:  DefaultFlushConsumeQueueInterval,
		FileReservedTime:           DefaultFileReservedTime,
		DeleteWhen:                 DefaultDeleteWhen,
		DiskMaxUsedSpaceRatio:      DefaultDiskMaxUsedSpaceRatio,
		DiskHardLimitRatio:         DefaultDiskHardLimitRatio,
		DiskReserveBytes:           DefaultDiskReserveBytes,
		RetentionCheckInterval:     DefaultRetentionCheckInterval,
		MaxMessageBytes:            DefaultMaxMessageBytes,
		MaxScanEntries:             DefaultMaxScanEntries,
		IndexHashSlots:             DefaultIndexHashSlots,
		IndexMaxEntries:            DefaultIndexMaxEntries,
		Now:                        time.Now,
	}
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("store: config: "+format, args...))
		}
	}
	check(c.Dir != "", "Dir is empty")
	check(c.FS != nil, "FS is nil")
	check(c.FlushDiskType == SyncFlush || c.FlushDiskType == AsyncFlush, "unknown FlushDiskType %d", c.FlushDiskType)
	check(c.CommitLogSegmentBytes >= commitlog.MinSegmentBytes, "CommitLogSegmentBytes %d < %d", c.CommitLogSegmentBytes, commitlog.MinSegmentBytes)
	check(c.ConsumeQueueSegmentEntries > 0, "ConsumeQueueSegmentEntries must be > 0")
	check(c.SyncFlushTimeout > 0 && c.FlushInterval > 0 && c.FlushConsumeQueueInterval > 0 && c.RetentionCheckInterval > 0,
		"SyncFlushTimeout, FlushInterval, FlushConsumeQueueInterval and RetentionCheckInterval must be > 0")
	check(c.FileReservedTime > 0, "FileReservedTime must be > 0")
	check(c.DiskMaxUsedSpaceRatio > 0 && c.DiskMaxUsedSpaceRatio <= 100, "DiskMaxUsedSpaceRatio %d not in (0, 100]", c.DiskMaxUsedSpaceRatio)
	check(c.DiskHardLimitRatio > 0 && c.DiskHardLimitRatio <= 100, "DiskHardLimitRatio %d not in (0, 100]", c.DiskHardLimitRatio)
	check(c.DiskReserveBytes >= 0, "DiskReserveBytes must be >= 0")
	check(c.DiskPressureDelete >= PressureDeleteExpired && c.DiskPressureDelete <= PressureDeleteUnconsumed, "unknown DiskPressureDelete %d", c.DiskPressureDelete)
	check(c.MaxMessageBytes > 0, "MaxMessageBytes must be > 0")
	check(c.MaxRecordBodyBytes >= 0, "MaxRecordBodyBytes must be >= 0")
	check(c.MaxScanEntries > 0, "MaxScanEntries must be > 0")
	check(c.ScrubBytesPerSecond >= 0, "ScrubBytesPerSecond %d < 0", c.ScrubBytesPerSecond)
	check(c.IndexHashSlots > 0 && c.IndexMaxEntries > 0, "IndexHashSlots and IndexMaxEntries must be > 0")
	if _, err := parseDeleteWhen(c.DeleteWhen); err != nil {
		errs = append(errs, err)
	}
	// The largest record (body + the V1 header, topic and properties at
	// their limits) must fit in a segment with its trailer and an end marker.
	maxRecord := c.maxRecordBytes()
	check(maxRecord+commitlog.TrailerBytes+commitlog.BlankBytes <= c.CommitLogSegmentBytes,
		"CommitLogSegmentBytes %d cannot hold a message of %d bytes (MaxMessageBytes, MaxRecordBodyBytes) with its header", c.CommitLogSegmentBytes, c.maxBodyBytes())
	return errors.Join(errs...)
}

// maxRecordBytes is the largest record a put can produce: the body limit
// plus the V1 header with IPv6 hosts, the longest topic and properties.
func (c *Config) maxRecordBytes() int64 {
	return int64(c.maxBodyBytes()) + message.MinRecordBytes + 24 + message.MaxTopicBytes + message.MaxPropertiesBytes
}

// maxBodyBytes is the largest body of any record.
func (c *Config) maxBodyBytes() int { return max(c.MaxMessageBytes, c.MaxRecordBodyBytes) }

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.GroupCommitDelay == 0 {
		c.GroupCommitDelay = DefaultGroupCommitDelay
	}
	if c.CommitSiblings <= 0 {
		c.CommitSiblings = DefaultCommitSiblings
	}
	if c.PrefillBytes == 0 && c.FlushDiskType == SyncFlush {
		c.PrefillBytes = DefaultPrefillBytes
	}
}

// scrubPassInterval is ScrubPassInterval with its default.
func (c *Config) scrubPassInterval() time.Duration {
	if c.ScrubPassInterval == 0 {
		return DefaultScrubPassInterval
	}
	return c.ScrubPassInterval
}

// readWindowBytes is the commitlog's ReadWindowBytes: 0 for none.
func (c *Config) readWindowBytes() int64 {
	if c.ReadWindowBytes == 0 {
		return DefaultReadWindowBytes
	}
	return max(c.ReadWindowBytes, 0)
}

// prefillBytes is the commitlog's PrefillBytes: at most a segment, 0 for off.
func (c *Config) prefillBytes() int64 {
	return max(min(c.PrefillBytes, c.CommitLogSegmentBytes), 0)
}

// parseDeleteWhen parses "04" or "04;05" into hours.
func parseDeleteWhen(s string) ([]int, error) {
	var hours []int
	for _, p := range strings.Split(s, ";") {
		h, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || h < 0 || h > 23 {
			return nil, fmt.Errorf("store: config: DeleteWhen %q: want hours 00-23 separated by ';'", s)
		}
		hours = append(hours, h)
	}
	return hours, nil
}
