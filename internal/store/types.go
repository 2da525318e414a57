package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/consumequeue"
	"github.com/keelmq/keel/internal/store/record"
)

// Typed records. Every CommitLog record says what it is (package record);
// the store's generic paths — the CommitLog's record check, dispatch,
// reads, Check — ask the record's type, here, and never read a type's
// fields themselves. RocketMQ messages are rocketmq.go's; every other type
// uses the envelope, whose destinations say which ConsumeQueue entries the
// record gets (one record may be in several queues; a record holding n
// logical messages for a queue has n entries there, all locating it, when
// it says so with record.FlagEntryPerMessage — every Kafka batch this
// release writes — and one otherwise).

// recordType returns the type of a record that passed the CommitLog's
// verification (so its magic is known).
func recordType(rec []byte) record.Type {
	return record.TypeOfMagic(int32(binary.BigEndian.Uint32(rec[4:8])))
}

// checkRecord is the CommitLog's CheckRecord hook: the structural check of
// a record of any type, an error wrapping record.ErrUnknownType for an
// unknown one.
func checkRecord(rec []byte) error {
	t, err := record.TypeOf(rec)
	switch {
	case err != nil:
		return err
	case t == record.RocketMQ:
		return message.Check(rec)
	default:
		return record.CheckEnvelope(rec)
	}
}

// dispatchRecord dispatches one record by its type.
func (s *Store) dispatchRecord(rec []byte, phys int64) error {
	if t := recordType(rec); t != record.RocketMQ {
		return s.dispatchEnvelope(rec, phys, t)
	}
	return s.dispatchRocketMQ(rec, phys)
}

// dispatchEnvelope adds the ConsumeQueue entries of each destination of
// an enveloped record (one, or one per logical message: Entries), all
// locating the record, telling the subscribers of each queue once, at its
// last entry, and indexes the keys Config.IndexKeys names.
func (s *Store) dispatchEnvelope(rec []byte, phys int64, t record.Type) error {
	if !t.Enveloped() {
		panic(fmt.Sprintf("store: dispatch of a %v record at %d", t, phys)) // the reader verified it
	}
	e := record.Envelope(rec)
	if t == record.System {
		s.lastTs = e.StoreTimestamp()
		return s.dispatchSystem(rec, phys) // system.go: no destinations
	}
	if phys >= s.rebuildCQFrom {
		n := e.Entries()
		err := e.EachDest(func(_ int, topic []byte, qid int32, qo, code int64, _ int) error {
			if s.deletedRecord(topic, phys) {
				return nil // its topic was deleted after it (tombstone.go)
			}
			q, err := s.queueForDispatch(topic, qid)
			if err != nil {
				return err
			}
			for i := range n {
				if err := s.appendEntry(q, qid, qo+i, consumequeue.Entry{PhysOffset: phys, Size: int32(len(rec)), TagsCode: code}); err != nil {
					return fmt.Errorf("store: dispatch %v at %d to %s/%d offset %d: %w", t, phys, topic, qid, qo+i, err)
				}
			}
			s.tellVisible(q.Topic(), qid, qo+n-1, code)
			return nil
		})
		if err != nil {
			return err
		}
	}
	if phys >= s.rebuildIndexFrom && s.cfg.IndexKeys != nil {
		if err := s.indexEnvelope(rec, phys, t); err != nil {
			return err
		}
	}
	s.lastTs = e.StoreTimestamp()
	return nil
}

// indexEnvelope indexes the keys Config.IndexKeys names for an enveloped
// record under each of its destination topics (once per topic). Recovery
// indexes again from the checkpoint's index offset, as for RocketMQ
// records (rebuildIndexFrom: redispatch starts at the lower of it and the
// queues' offset). Its state is the store's (s.ix), so that indexing a
// record allocates nothing.
func (s *Store) indexEnvelope(rec []byte, phys int64, t record.Type) error {
	e := record.Envelope(rec)
	ix := &s.ix
	ix.topics = ix.topics[:0]
	e.EachDest(func(_ int, topic []byte, _ int32, _, _ int64, _ int) error {
		if !s.deletedRecord(topic, phys) && !slices.ContainsFunc(ix.topics, func(x []byte) bool { return bytes.Equal(x, topic) }) {
			ix.topics = append(ix.topics, topic)
		}
		return nil
	})
	if len(ix.topics) == 0 {
		return nil
	}
	if ix.key == nil {
		ix.s, ix.key = s, ix.put
	}
	ix.phys, ix.ts, ix.t, ix.err = phys, e.StoreTimestamp(), t, nil
	err := s.cfg.IndexKeys(rec, ix.key)
	clear(ix.topics) // they alias the reader's buffer
	if err != nil {
		s.logger.Warn("store: the keys of a record are not all indexed", "type", t, "offset", phys, "err", err)
	}
	return ix.err
}

// indexing is what indexEnvelope's key callback (put) needs of the record
// it indexes.
type indexing struct {
	s        *Store
	key      func([]byte) // put, bound once
	topics   [][]byte     // the record's destination topics, each once
	phys, ts int64
	t        record.Type
	err      error // the first failure to index a key
}

// put indexes key under each of the record's topics.
func (ix *indexing) put(key []byte) {
	if len(key) == 0 || ix.err != nil { // PutTopicKey refuses an empty key; the index has nothing to find by it
		return
	}
	for _, topic := range ix.topics {
		if err := ix.s.index.PutTopicKey(topic, key, ix.phys, ix.ts); err != nil {
			ix.err = fmt.Errorf("store: index %v at %d: %w", ix.t, ix.phys, err)
			return
		}
	}
}

// recordBelongs checks that rec, read for the ConsumeQueue entry at queue
// offset qo of (topic, queueID), is a record of that queue and offset.
func recordBelongs(rec []byte, phys int64, topic string, queueID int32, qo int64) error {
	if recordType(rec) == record.RocketMQ {
		v := message.View(rec)
		if string(v.Topic()) != topic || v.QueueID() != queueID || v.QueueOffset() != qo {
			return fmt.Errorf("store: record at %d belongs to %s/%d offset %d, not %s/%d offset %d: %w",
				phys, v.Topic(), v.QueueID(), v.QueueOffset(), topic, queueID, qo, ErrCorrupt)
		}
		return nil
	}
	if _, ok := envelopeDest(rec, topic, queueID, qo); !ok {
		return fmt.Errorf("store: %v at %d has no destination %s/%d offset %d: %w", recordType(rec), phys, topic, queueID, qo, ErrCorrupt)
	}
	return nil
}

// envelopeDest returns the tag code of the destination of an enveloped
// record that has entry qo of (topic, queueID) — its QUEUEOFFSET, or one of
// the Entries after it — and whether it has one.
func envelopeDest(rec []byte, topic string, queueID int32, qo int64) (int64, bool) {
	code, found := int64(0), false
	n := record.Envelope(rec).Entries()
	record.Envelope(rec).EachDest(func(_ int, t []byte, qid int32, o, c int64, _ int) error {
		if !found && qid == queueID && qo >= o && qo-o < n && string(t) == topic {
			code, found = c, true
		}
		return nil
	})
	return code, found
}

// storeTimestamp returns the store time of a record of any type.
func storeTimestamp(rec []byte) int64 {
	if recordType(rec) == record.RocketMQ {
		return message.View(rec).StoreTimestamp()
	}
	return record.Envelope(rec).StoreTimestamp()
}

// ownOffset returns the CommitLog offset a record says it is at (the
// PHYSICALOFFSET field: at the same position in every type).
func ownOffset(rec []byte) int64 { return int64(binary.BigEndian.Uint64(rec[28:36])) }

// logicalMessages returns how many logical messages a record holds.
func logicalMessages(rec []byte) int64 {
	if recordType(rec) == record.RocketMQ {
		return 1
	}
	return int64(record.Envelope(rec).Messages())
}
