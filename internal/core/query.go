package core

// Looking messages up and reading the store's figures, for every front
// door's query and admin requests: queue bounds, offsets by time, messages
// by key (the index) or by CommitLog offset (a message ID), the store time
// at a queue offset, and the store's integrity report. Records come back
// as stored (RocketMQ's stored layout for RocketMQ messages); a front door
// encodes its answer from them. Consuming reads go through the store's
// GetMessage directly (read.go): that path lends the store's buffers to
// the connection without a copy.

import (
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// MaxOffset returns the next queue offset queue queueID of topic assigns
// (its entry count).
func (b *Broker) MaxOffset(topic string, queueID int32) int64 { return b.st.MaxOffset(topic, queueID) }

// MinOffset returns the queue's oldest retained offset.
func (b *Broker) MinOffset(topic string, queueID int32) int64 { return b.st.MinOffset(topic, queueID) }

// OffsetByTime returns the queue offset of the first message stored at or
// after tsMs (Unix ms).
func (b *Broker) OffsetByTime(topic string, queueID int32, tsMs int64) int64 {
	return b.st.OffsetByTime(topic, queueID, tsMs)
}

// EarliestStoreTime returns the store time (Unix ms) of the queue's oldest
// readable message.
func (b *Broker) EarliestStoreTime(topic string, queueID int32) (int64, error) {
	return b.st.EarliestStoreTime(topic, queueID)
}

// VisibleOffset returns the CommitLog offset up to which messages are
// dispatched and so found by reads and queries.
func (b *Broker) VisibleOffset() int64 { return b.st.VisibleOffset() }

// StoreTimeAt returns the store time (Unix ms) of the message at a queue
// offset, or 0 when there is none (or it cannot be read).
func (b *Broker) StoreTimeAt(topic string, queueID int32, offset int64) int64 {
	res, err := b.st.GetMessage(topic, queueID, offset, 1, 1, nil)
	if err != nil {
		return 0
	}
	defer res.Release()
	if len(res.Records) == 0 {
		return 0
	}
	return message.View(res.Records[0]).StoreTimestamp()
}

// LookMessage returns the stored record at CommitLog offset physOffset
// (the offset a message ID names).
func (b *Broker) LookMessage(physOffset int64) ([]byte, error) {
	return b.st.LookMessageByOffset(physOffset)
}

// QueryByKey looks key (a KEYS token or a UNIQ_KEY) of topic up in the
// index among messages stored within [beginMs, endMs] and returns at most
// maxNum records, newest first as the index yields them. A record the
// index names but that cannot be read is skipped (and logged). The caller
// filters the exact key: the index may also yield colliding keys.
func (b *Broker) QueryByKey(topic, key string, maxNum int, beginMs, endMs int64) ([][]byte, error) {
	offs, err := b.st.QueryByKey(topic, key, maxNum, beginMs, endMs)
	if err != nil {
		return nil, Errorf(ErrInternal, "query %s#%s failed: %v", topic, key, err)
	}
	recs := make([][]byte, 0, len(offs))
	for _, off := range offs {
		rec, err := b.st.LookMessageByOffset(off)
		if err != nil {
			b.log.Warn("indexed message unreadable", "topic", topic, "offset", off, "err", err)
			continue
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// IsolatedRecord is a record withheld from consumers because it failed
// verification (the store's registry entry).
type IsolatedRecord = store.IsolatedRecord

// IntegrityStats is the store's verification report (read faults, the
// scrubber's progress and recent problems).
type IntegrityStats = store.IntegrityStats

// Isolated lists the records isolated as corrupt, oldest first.
func (b *Broker) Isolated() []IsolatedRecord { return b.st.Isolated() }

// IntegrityStats returns the store's verification report.
func (b *Broker) IntegrityStats() IntegrityStats { return b.st.IntegrityStats() }
