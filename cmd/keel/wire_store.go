package main

import (
	"context"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/translate"
)

// indexKeys names the index keys of Kafka batches and AMQP messages
// (docs/cross-protocol.md, "Finding messages").
func indexKeys(rec []byte, key func([]byte)) error {
	return translate.IndexKeys(rec, translate.DefaultLimit, key)
}

// storeConfig converts the broker config into the store's.
func storeConfig(b *config.Broker, p *parts) store.Config {
	c := store.DefaultConfig(b.StorePathRootDir)
	c.FlushDiskType = store.AsyncFlush
	if b.FlushDiskType == config.SyncFlush {
		c.FlushDiskType = store.SyncFlush
	}
	c.CommitLogSegmentBytes = b.CommitLogSegmentBytes
	c.ConsumeQueueSegmentEntries = b.ConsumeQueueSegmentEntries
	c.SyncFlushTimeout = b.SyncFlushTimeout
	c.FlushInterval = b.FlushIntervalCommitLog
	c.FlushConsumeQueueInterval = b.FlushIntervalConsumeQueue
	c.CommitDelay = b.CommitDelay
	c.CommitSiblings = b.CommitSiblings
	c.FileReservedTime = b.FileReservedTime
	c.DeleteWhen = b.DeleteWhen
	c.DiskMaxUsedSpaceRatio = b.DiskMaxUsedSpaceRatio
	c.DiskHardLimitRatio = b.DiskHardLimitRatio
	c.DiskPressureDelete = storePressureDelete(b.DiskPressureDelete)
	c.MaxMessageBytes = b.MaxMessageBytes
	// Every member of a group takes the AMQP door's largest message, on
	// or off: a replica stores what its master stored.
	c.MaxRecordBodyBytes = b.AMQPMaxMessage()
	c.CommitLogCacheBytes = b.CommitLogPageCacheBytes
	c.ReadWindowBytes = b.CommitLogReadWindowBytes
	if c.ReadWindowBytes == 0 {
		c.ReadWindowBytes = -1 // commitLogReadWindowBytes=0: none
	}
	c.ScrubBytesPerSecond = b.ScrubBytesPerSecond
	c.RepairCorruption = p.repairCorruption
	c.OnFlush = p.onFlush
	c.TagsCode = scheduleTagsCode(b)
	c.IndexKeys = indexKeys
	// An ASYNC_MASTER in controller mode confirms through its lease
	// (replication.MasterConfig.Leased), so its Replicated watermark is
	// moved by its replication too.
	c.ExternalReplication = b.BrokerRole == config.SyncMaster || b.BrokerRole == config.AsyncMaster && b.EnableControllerMode
	c.ReplicationTimeout = b.ReplicaAckTimeout
	c.Replica = b.BrokerRole == config.Slave
	c.Logger = p.log.With("component", "store")
	return c
}

// storePressureDelete converts diskPressureDelete (validated by config).
func storePressureDelete(p config.DiskPressureDelete) store.PressureDelete {
	switch p {
	case config.PressureDeleteConsumed:
		return store.PressureDeleteConsumed
	case config.PressureDeleteUnconsumed:
		return store.PressureDeleteUnconsumed
	}
	return store.PressureDeleteExpired
}

// storeStarter opens the message store under cfg.StorePathRootDir: lock,
// recover, start flusher, dispatcher and retention. Its stop closes the
// store: flush, checkpoint, remove the abort marker, unlock.
func (p *parts) storeStarter() starter {
	return func() (service, error) {
		st, err := store.Open(storeConfig(p.cfg, p))
		if err != nil {
			return service{}, err
		}
		p.store = st
		p.log.Info("store open", "dir", p.cfg.StorePathRootDir, "flush", p.cfg.FlushDiskType,
			"visible_offset", st.VisibleOffset())
		return service{name: "store", stop: func(context.Context) error { return st.Close() }}, nil
	}
}
