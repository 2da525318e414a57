package core

// Committed consumer offsets.
//
// An offset is (group, topic, queueId) -> next offset to consume. Commits
// (CommitOffset, RecordOffset) go to memory and are written crash-safely to
// <DataDir>/config/consumerOffset.json by FlushOffsets (every
// OffsetFlushInterval, and on Close, by the front door that owns the core).
// A crash can lose at most one interval of commits, which means
// re-delivery (at-least-once), never loss.
//
// ConsumerOffset keeps RocketMQ's zero-if-young rule: a group with no
// offset for a queue whose first message is still stored (min offset 0) and
// recent (YoungQueueBytes) gets offset 0, so a new group that starts from
// the last offset reads a young queue from the start.

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

type offsetKey struct {
	group, topic string
	queueID      int32
}

type offsetTable struct {
	fs   vfs.FS
	path string

	flushMu sync.Mutex // serialises flushes; held before mu

	mu      sync.Mutex
	m       map[offsetKey]int64
	version uint64 // bumped on every change
	saved   uint64 // version on disk

	rates *consumeRates // nil: not measured

	// advancedMs is when each offset last moved forward (Unix ms, broker
	// clock; in memory only, so empty after a restart). It is what
	// "last consumed" means: the store time of the last consumed message
	// (RocketMQ's lastTimestamp) is old on a quiet topic or a lagging group
	// although the group consumes. Guarded by mu; now nil: not recorded.
	advancedMs map[offsetKey]int64
	now        func() time.Time

	// Metadata in the log (syslog.go, apply.go). sys, set on a master
	// serving slaves, appends a record; dirty (guarded by mu, nil when
	// sys is) holds the commits not in a record yet; logEnd (guarded by
	// mu) is the snapshot point of m.
	sys    func(*record.SystemRecord) (end int64, logged bool, err error)
	dirty  map[offsetKey]int64
	logEnd int64
	// local (guarded by mu; nil but on a replica) holds the commits made
	// on this replica that its master has not confirmed yet
	// (replica_offsets.go).
	local map[offsetKey]int64
}

func newOffsetTable(fsys vfs.FS, path string) *offsetTable {
	return &offsetTable{fs: fsys, path: path, m: make(map[offsetKey]int64), advancedMs: make(map[offsetKey]int64)}
}

// File layout (RocketMQ's): {"offsetTable":{"topic@group":{"0":12,"1":7}}}.
type offsetFile struct {
	OffsetTable map[string]map[string]int64 `json:"offsetTable"`
	// KeelLogOffset is the snapshot point (apply.go).
	KeelLogOffset int64 `json:"keelLogOffset,omitempty"`
	// KeelReplicaOffsets: a replica's own commits (replica_offsets.go).
	KeelReplicaOffsets map[string]map[string]int64 `json:"keelReplicaOffsets,omitempty"`
}

func (t *offsetTable) load() error {
	data, ok, err := readFile(t.fs, t.path)
	if err != nil || !ok {
		return err
	}
	var f offsetFile
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("broker: parse %s: %w", t.path, err)
	}
	m := make(map[offsetKey]int64)
	for k, queues := range f.OffsetTable {
		topic, group, ok := strings.Cut(k, "@")
		if !ok {
			return fmt.Errorf("broker: parse %s: bad key %q", t.path, k)
		}
		for q, off := range queues {
			qid, err := strconv.ParseInt(q, 10, 32)
			if err != nil {
				return fmt.Errorf("broker: parse %s: bad queue id %q", t.path, q)
			}
			m[offsetKey{group, topic, int32(qid)}] = off
		}
	}
	if f.KeelLogOffset < 0 {
		return fmt.Errorf("broker: parse %s: keelLogOffset %d", t.path, f.KeelLogOffset)
	}
	local, err := parseOffsetMap(f.KeelReplicaOffsets, t.path)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.m, t.logEnd = m, f.KeelLogOffset
	if t.local != nil {
		t.local = local
	}
	t.mu.Unlock()
	return nil
}

func (t *offsetTable) get(group, topic string, queueID int32) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if off, ok := t.local[offsetKey{group, topic, queueID}]; ok {
		return off, true
	}
	off, ok := t.m[offsetKey{group, topic, queueID}]
	return off, ok
}

// consumedAt returns when the offset last moved forward (Unix ms), or 0
// when it did not since the broker started.
func (t *offsetTable) consumedAt(group, topic string, queueID int32) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.advancedMs[offsetKey{group, topic, queueID}]
}

func (t *offsetTable) commit(group, topic string, queueID int32, offset int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := offsetKey{group, topic, queueID}
	if t.local != nil {
		t.commitLocalLocked(k, offset) // replica_offsets.go
		return
	}
	old, ok := t.m[k]
	if ok && old == offset {
		return
	}
	if ok && t.rates != nil {
		t.rates.add(group, topic, offset-old)
	}
	if t.now != nil && (!ok || offset > old) {
		t.advancedMs[k] = t.now().UnixMilli()
	}
	t.m[k] = offset
	if t.dirty != nil {
		t.dirty[k] = offset
	}
	t.version++
}

// deleteOne drops the offset of one queue; it reports whether there
// was one. On a master serving slaves it logs the deletion (apply.go).
func (t *offsetTable) deleteOne(group, topic string, queueID int32) (bool, error) {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	k := offsetKey{group, topic, queueID}
	t.mu.Lock()
	_, had := t.m[k]
	_, hadLocal := t.local[k]
	t.mu.Unlock()
	if !had && !hadLocal {
		return false, nil
	}
	dirtyErr := t.logDirtyLocked()
	t.mu.Lock()
	delete(t.m, k)
	delete(t.local, k)
	delete(t.advancedMs, k)
	delete(t.dirty, k)
	t.version++
	t.mu.Unlock()
	return true, errors.Join(dirtyErr, t.logDeleteLocked(group, topic, queueID))
}

func (t *offsetTable) deleteTopic(topic string) error {
	return t.deleteMatching("", topic)
}

func (t *offsetTable) deleteGroup(group string) error {
	return t.deleteMatching(group, "")
}

// deleteMatching drops the offsets of group ("" = any) on topic ("" =
// any); on a master serving slaves it logs the deletion (apply.go). The
// deletion is made whatever the log says; an error reports a record that
// was not written or not confirmed.
func (t *offsetTable) deleteMatching(group, topic string) error {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	dirtyErr := t.logDirtyLocked()
	t.mu.Lock()
	for k := range t.m {
		if (group == "" || k.group == group) && (topic == "" || k.topic == topic) {
			delete(t.m, k)
			delete(t.advancedMs, k)
			delete(t.dirty, k)
			t.version++
		}
	}
	if t.rates != nil {
		t.rates.forget(group, topic)
	}
	t.mu.Unlock()
	return errors.Join(dirtyErr, t.logDeleteLocked(group, topic, -1))
}

// flush writes the table if it changed since the last flush.
func (t *offsetTable) flush() error {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	logErr := t.logDirtyLocked() // apply.go: the log first, on a master serving slaves
	t.mu.Lock()
	if t.version == t.saved {
		t.mu.Unlock()
		return logErr
	}
	ver := t.version
	f := offsetFile{OffsetTable: make(map[string]map[string]int64), KeelLogOffset: t.logEnd, KeelReplicaOffsets: encodeOffsetMap(t.local)}
	for k, off := range t.m {
		name := k.topic + "@" + k.group
		q := f.OffsetTable[name]
		if q == nil {
			q = make(map[string]int64)
			f.OffsetTable[name] = q
		}
		q[itoa(k.queueID)] = off
	}
	t.mu.Unlock()
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("broker: encode offsets: %w", err)
	}
	if err := writeFileAtomic(t.fs, t.path, data); err != nil {
		return err
	}
	t.mu.Lock()
	t.saved = ver
	t.mu.Unlock()
	return logErr
}

func (t *offsetTable) topicsOf(group string) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]bool)
	for k := range t.m {
		if k.group == group {
			out[k.topic] = true
		}
	}
	return out
}

func (t *offsetTable) groupNames() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	set := make(map[string]bool)
	for k := range t.m {
		set[k.group] = true
	}
	out := make([]string, 0, len(set))
	for g := range set {
		out = append(out, g)
	}
	return out
}

// ConsumerOffset returns the committed offset of a group on a queue. A
// group without one gets 0 when zeroIfYoung is set and the queue is young
// (see the file comment); otherwise ok is false.
func (b *Broker) ConsumerOffset(group, topic string, qid int32, zeroIfYoung bool) (offset int64, ok bool) {
	if off, ok := b.offsets.get(group, topic, qid); ok {
		return off, true
	}
	if zeroIfYoung && b.queueIsYoung(topic, qid) {
		return 0, true
	}
	return 0, false
}

// queueIsYoung reports whether a queue still holds its first message and
// that message is within YoungQueueBytes of the CommitLog end (or the queue
// is empty).
func (b *Broker) queueIsYoung(topic string, qid int32) bool {
	if b.st.MinOffset(topic, qid) > 0 {
		return false
	}
	if b.st.MaxOffset(topic, qid) == 0 {
		return true
	}
	res, err := b.st.GetMessage(topic, qid, 0, 1, 1, nil)
	if err != nil {
		return false
	}
	defer res.Release()
	if len(res.Records) == 0 {
		return false
	}
	phys := message.View(res.Records[0]).PhysOffset()
	return b.st.VisibleOffset()-phys <= b.cfg.YoungQueueBytes
}

// DeleteOffset drops group's committed offset of one queue (Kafka's
// OffsetDelete); it reports whether there was one. FlushOffsets makes it
// durable.
func (b *Broker) DeleteOffset(group, topic string, qid int32) bool {
	had, err := b.offsets.deleteOne(group, topic, qid)
	if err != nil {
		b.log.Warn("offset deleted; the record of it is not confirmed", "group", group, "topic", topic, "queue", qid, "err", err)
	}
	return had
}

// CommitOffset stores a group's offset on a queue of an existing topic
// (creating the group if allowed).
func (b *Broker) CommitOffset(group, topic string, qid int32, off int64) error {
	if _, ok := b.topics.get(topic); !ok {
		return Errorf(ErrTopicNotFound, "topic[%s] not exist", topic)
	}
	if _, err := b.EnsureGroup(group); err != nil {
		return err
	}
	if off < 0 {
		return Errorf(ErrInvalidArgument, "commitOffset %d is negative", off)
	}
	b.offsets.commit(group, topic, qid, off)
	return nil
}

// RecordOffset stores a group's offset on a queue without checks (an
// offset a consumer reports along with a pull).
func (b *Broker) RecordOffset(group, topic string, qid int32, off int64) {
	b.offsets.commit(group, topic, qid, off)
}

// OffsetTopics returns the topics a group has committed offsets for.
func (b *Broker) OffsetTopics(group string) map[string]bool { return b.offsets.topicsOf(group) }

// OffsetGroups returns the groups with committed offsets.
func (b *Broker) OffsetGroups() []string { return b.offsets.groupNames() }

// ConsumeRate is how many messages per second a group consumed from a
// topic over the last minute, measured on its committed offsets.
func (b *Broker) ConsumeRate(group, topic string) float64 { return b.offsets.rates.rate(group, topic) }

// FlushOffsets writes the committed offsets if they changed since the last
// flush.
func (b *Broker) FlushOffsets() error {
	var delayErr error
	if d := b.sys.delay; d != nil {
		delayErr = d.flush() // delay.go
	}
	errs := []error{b.offsets.flush(), b.topics.flushReplayed(), b.groups.flushReplayed(), delayErr}
	for _, t := range b.cfg.Tables {
		errs = append(errs, t.Flush())
	}
	return errors.Join(errs...)
}

// OffsetsByTopic returns the committed offsets as topic -> group -> queue
// -> offset (a copy), for the store's disk-pressure retention.
func (b *Broker) OffsetsByTopic() store.ConsumerOffsets { return b.offsets.byTopic() }

// ConsumedAt returns when the group's committed offset of the queue last
// moved forward (Unix ms, broker clock), or 0 when it did not since the
// broker started.
func (b *Broker) ConsumedAt(group, topic string, queueID int32) int64 {
	return b.offsets.consumedAt(group, topic, queueID)
}

// byTopic returns the committed offsets as topic -> group -> queue ->
// offset.
func (t *offsetTable) byTopic() store.ConsumerOffsets {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := store.ConsumerOffsets{}
	for k, off := range t.m {
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
	t.mergeLocalLocked(out) // replica_offsets.go
	return out
}
