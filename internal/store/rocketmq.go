package store

import (
	"bytes"
	"fmt"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/consumequeue"
)

// The RocketMQ message record type (record.RocketMQ, RocketMQ's stored
// MessageExt V1): what the store knows of it, kept apart from the generic
// paths. Its properties decide its acknowledgement (WAIT), its index keys
// (KEYS tokens and UNIQ_KEY) and its tag code (TAGS, or Config.TagsCode).
// A record gets one ConsumeQueue entry, at the queue and queue offset in
// its own fields.

// ackAtWrite reports whether a batch of RocketMQ messages is to be
// acknowledged once written, without waiting for Confirmed: a message with
// the property WAIT=false asks so, as in RocketMQ.
func ackAtWrite(ms []*message.Message) bool {
	for _, m := range ms {
		if m == nil {
			continue
		}
		if v, ok := message.Property(m.Properties, message.PropWaitStoreMsgOK); ok && v == "false" {
			return true
		}
	}
	return false
}

// dispatchRocketMQ adds the ConsumeQueue entry and the index entries of a
// RocketMQ record, then tells the subscribers.
func (s *Store) dispatchRocketMQ(rec []byte, phys int64) error {
	v := message.View(rec)
	topic, qid, qo := v.Topic(), v.QueueID(), v.QueueOffset()
	if s.deletedRecord(topic, phys) {
		return nil // its topic was deleted after it (tombstone.go)
	}
	tags, keys, uniq := v.IndexProps() // one pass over the properties
	if phys < s.rebuildCQFrom {
		// Recovery: the queues already hold it. It is indexed without
		// checking rebuildIndexFrom because redispatch starts at the lower
		// of the two, so here phys >= rebuildIndexFrom.
		return s.indexRecord(v, topic, phys, keys, uniq)
	}
	q, err := s.queueForDispatch(topic, qid)
	if err != nil {
		return err
	}
	code := s.cfg.tagsCode(v, tags)
	if err := s.appendEntry(q, qid, qo, consumequeue.Entry{PhysOffset: phys, Size: int32(len(rec)), TagsCode: code}); err != nil {
		return fmt.Errorf("store: dispatch record at %d to %s/%d offset %d: %w", phys, topic, qid, qo, err)
	}
	if phys >= s.rebuildIndexFrom {
		if err := s.indexRecord(v, topic, phys, keys, uniq); err != nil {
			return err
		}
	}
	s.lastTs = v.StoreTimestamp()
	s.tellVisible(q.Topic(), qid, qo, code) // the queue's string: no copy per record
	return nil
}

// tagsCode is the tag code of the record v whose TAGS property is tags.
func (c *Config) tagsCode(v message.View, tags []byte) int64 {
	if c.TagsCode != nil {
		return c.TagsCode(v, tags)
	}
	return message.TagsCodeBytes(tags)
}

// indexRecord indexes the KEYS tokens (keys) and the UNIQ_KEY (uniq) of the
// record v under "topic#key".
func (s *Store) indexRecord(v message.View, topic []byte, phys int64, keys, uniq []byte) error {
	ts := v.StoreTimestamp()
	put := func(key []byte) error {
		if len(key) == 0 {
			return nil
		}
		if err := s.index.PutTopicKey(topic, key, phys, ts); err != nil {
			return fmt.Errorf("store: index record at %d: %w", phys, err)
		}
		return nil
	}
	for key := range bytes.FieldsSeq(keys) { // bytes.Fields without its slice
		if err := put(key); err != nil {
			return err
		}
	}
	return put(uniq)
}

// rocketMQKeys returns the index keys of a RocketMQ record: its KEYS tokens
// and its UNIQ_KEY.
func rocketMQKeys(v message.View) []string {
	var keys []string
	for _, k := range bytes.Fields(v.Keys()) {
		keys = append(keys, string(k))
	}
	if u := v.UniqKey(); len(u) > 0 {
		keys = append(keys, string(u))
	}
	return keys
}
