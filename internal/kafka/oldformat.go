package kafka

// Batches of an earlier release. Releases before record.FlagEntryPerMessage
// stored a Kafka batch with one ConsumeQueue entry for all its records, so
// their Kafka offsets were not queue offsets. This release does not serve
// a partition holding such a batch (its offsets cannot be mapped without
// moving those of everything after it): every Kafka request on it gets
// KAFKA_STORAGE_ERROR naming the reason, logged once, while RocketMQ and
// AMQP consumers go on reading it (docs/kafka.md, "Upgrading"). A
// partition is examined once, at its first Kafka request: its entries from
// the first still stored to those present then, up to the first Kafka
// batch (batches appended later are this release's). A pure Kafka
// partition reads one entry.

import (
	"errors"
	"fmt"
	"sync"

	"github.com/keelmq/keel/internal/store"
)

// errOldFormat is the refusal of a partition holding old-format batches.
var errOldFormat = errors.New("kafka: the partition holds Kafka batches written by an earlier release (one queue entry per batch); it is not served to Kafka clients: see docs/kafka.md, Upgrading")

// oldFormat is what the examination found.
type oldFormat struct {
	mu      sync.Mutex
	checked bool
	found   bool
}

// checkFormat returns errOldFormat (wrapped with the partition) when p
// holds batches of an earlier release.
func (ps *partitions) checkFormat(p *partition) error {
	p.old.mu.Lock()
	defer p.old.mu.Unlock()
	if !p.old.checked {
		found, err := ps.scanOldFormat(p.key)
		if err != nil {
			return err
		}
		p.old.checked, p.old.found = true, found
	}
	if p.old.found {
		return fmt.Errorf("%s/%d: %w", p.key.topic, p.key.queueID, errOldFormat)
	}
	return nil
}

// scanOldFormat reads the entries of k up to the first Kafka batch and
// reports whether that batch is of the old format.
func (ps *partitions) scanOldFormat(k queueKey) (bool, error) {
	pos, hi := ps.st.MinOffset(k.topic, k.queueID), ps.st.MaxOffset(k.topic, k.queueID)
	for pos < hi {
		r, err := ps.st.GetMessage(k.topic, k.queueID, pos, 64, 1<<20, nil)
		if err != nil {
			return false, err
		}
		if r.Status != store.Found {
			next := r.NextOffset
			r.Release()
			if next <= pos {
				return false, nil
			}
			pos = next
			continue
		}
		for _, rec := range r.Records {
			b, err := kafkaView(rec, k)
			if err != nil {
				r.Release()
				return false, err
			}
			if b.ok {
				r.Release()
				return b.old, nil
			}
		}
		pos = max(r.NextOffset, pos+1)
		r.Release()
	}
	return false, nil
}
