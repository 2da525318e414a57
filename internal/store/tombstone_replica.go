package store

import (
	"errors"
	"fmt"
)

// ErrNotInSystemFunc is returned by DeleteReplicatedTopic called anywhere
// but from the store's SystemFunc.
var ErrNotInSystemFunc = errors.New("store: only a SystemFunc may delete a replicated topic")

// DeleteReplicatedTopic is DeleteTopic on a replica, for the topic
// deletion its master logged in the system record whose entry ends at
// end: the topic's records before end get a durable tombstone (dispatch,
// recovery's re-dispatch included, never indexes them again, and Check
// expects no entries for them), and its ConsumeQueues are dropped. It is
// called from the SystemFunc (the dispatcher, which is at that record:
// everything before it is dispatched, nothing after it). A tombstone of
// the topic already at or past end (the deletion was applied before a
// restart replayed its record) makes it do nothing, so the queues of a
// topic created again after the deletion are never dropped.
func (s *Store) DeleteReplicatedTopic(topic string, end int64) error {
	if !s.cfg.Replica {
		return fmt.Errorf("store: delete replicated topic %s: the store is not a replica's", topic)
	}
	if !s.inSystemFn {
		return ErrNotInSystemFunc
	}
	if s.tombstones[topic] >= end {
		return nil
	}
	if err := s.addTombstone(topic, end); err != nil {
		return err
	}
	s.qmu.Lock()
	qs := s.queues[topic]
	delete(s.queues, topic)
	s.qmu.Unlock()
	var errs []error
	for _, q := range qs {
		errs = append(errs, q.Destroy())
	}
	s.removeTopicDir(topic)
	if err := errors.Join(errs...); err != nil {
		// The tombstone is durable: a queue file left behind holds
		// entries no reader is given (the queue is gone from memory) and
		// the next start skips the topic's records before end.
		s.logger.Warn("store: consume queue of a replicated topic deletion not removed", "topic", topic, "err", err)
	}
	s.logger.Info("store: topic deleted as on the master", "topic", topic, "tombstone", end, "queues", len(qs))
	return nil
}
