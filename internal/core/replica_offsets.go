package core

// Offsets committed on a replica (docs/replication.md, "Reads from
// slaves").
//
// A replica's CommitLog is its master's, so a consumer that commits an
// offset to a slave (the master is down, and the client falls back to
// the slave, as RocketMQ's Java client does) cannot be given a system
// record. The replica keeps such commits apart from what the log says
// (local, written with the offsets file as "keelReplicaOffsets" at every
// FlushOffsets), serves them in preference to the replicated value, and
// hands them to the master when replication connects again
// (ReplicaOffsets; the replication link's offsets frame). The master
// takes a reported offset only if it is ahead of its own
// (MergeReplicaOffsets), and logs it like any commit; the replica drops a
// local entry once a record from the master sets that queue's offset to
// it or beyond (or deletes it).

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/store/record"
)

// OffsetCommit is one committed offset.
type OffsetCommit struct {
	Group, Topic string
	QueueID      int32
	Offset       int64
}

// ReplicaOffsets returns the commits made on this replica that its master
// has not confirmed yet (nil on a master).
func (b *Broker) ReplicaOffsets() []OffsetCommit {
	t := b.offsets
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []OffsetCommit
	for k, off := range t.local {
		out = append(out, OffsetCommit{Group: k.group, Topic: k.topic, QueueID: k.queueID, Offset: off})
	}
	return out
}

// MergeReplicaOffsets takes the offsets a replica reports, each only if
// the topic exists here and the offset is ahead of this broker's own for
// the queue (or it has none); it returns how many it took. They are
// committed as any commit (on a master serving slaves, logged at the next
// FlushOffsets).
func (b *Broker) MergeReplicaOffsets(offs []OffsetCommit) int {
	if b.sys.replica {
		return 0
	}
	n := 0
	for _, o := range offs {
		if o.Offset < 0 || o.Group == "" {
			continue
		}
		if _, ok := b.topics.get(o.Topic); !ok {
			continue
		}
		if cur, ok := b.offsets.get(o.Group, o.Topic, o.QueueID); ok && cur >= o.Offset {
			continue
		}
		b.offsets.commit(o.Group, o.Topic, o.QueueID, o.Offset)
		n++
	}
	if n > 0 {
		b.log.Info("offsets committed on a replica taken", "offsets", n, "reported", len(offs))
	}
	return n
}

// commitLocalLocked is commit on a replica. mu is held.
func (t *offsetTable) commitLocalLocked(k offsetKey, offset int64) {
	old, ok := t.local[k]
	if !ok {
		old, ok = t.m[k]
	}
	if ok && old == offset {
		return
	}
	if ok && t.rates != nil {
		t.rates.add(k.group, k.topic, offset-old)
	}
	if t.now != nil && (!ok || offset > old) {
		t.advancedMs[k] = t.now().UnixMilli()
	}
	t.local[k] = offset
	t.version++
}

// confirmLocalLocked drops local entries the master's record of offs
// caught up with. mu is held.
func (t *offsetTable) confirmLocalLocked(offs []record.OffsetEntry) {
	for _, o := range offs {
		k := offsetKey{o.Group, o.Topic, o.QueueID}
		if local, ok := t.local[k]; ok && o.Offset >= local {
			delete(t.local, k)
		}
	}
}

// mergeLocalLocked adds the local entries to out (they win). mu is held.
func (t *offsetTable) mergeLocalLocked(out map[string]map[string]map[int32]int64) {
	for k, off := range t.local {
		groups := out[k.topic]
		if groups == nil {
			groups = map[string]map[int32]int64{}
			out[k.topic] = groups
		}
		queues := groups[k.group]
		if queues == nil {
			queues = map[int32]int64{}
			groups[k.group] = queues
		}
		queues[k.queueID] = off
	}
}

// encodeOffsetMap returns m in the offsets file's layout (nil if empty).
func encodeOffsetMap(m map[offsetKey]int64) map[string]map[string]int64 {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]map[string]int64)
	for k, off := range m {
		name := k.topic + "@" + k.group
		q := out[name]
		if q == nil {
			q = make(map[string]int64)
			out[name] = q
		}
		q[itoa(k.queueID)] = off
	}
	return out
}

// parseOffsetMap reads the offsets file's layout.
func parseOffsetMap(f map[string]map[string]int64, path string) (map[offsetKey]int64, error) {
	m := make(map[offsetKey]int64)
	for k, queues := range f {
		topic, group, ok := strings.Cut(k, "@")
		if !ok {
			return nil, fmt.Errorf("broker: parse %s: bad key %q", path, k)
		}
		for q, off := range queues {
			qid, err := strconv.ParseInt(q, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("broker: parse %s: bad queue id %q", path, q)
			}
			m[offsetKey{group, topic, int32(qid)}] = off
		}
	}
	return m, nil
}
