package core

// Applying system records (syslog.go) to the core's tables: at start,
// from each file's snapshot point (on every broker), and on a replica as
// the dispatcher reaches them.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
)

// logOffsetKey is the JSON key of a file's snapshot point: the CommitLog
// offset up to which the system records of its table are in the file.
const logOffsetKey = "keelLogOffset"

func parseLogOffset(file map[string]json.RawMessage, path string) (int64, error) {
	raw, ok := file[logOffsetKey]
	if !ok {
		return 0, nil
	}
	var v int64
	if err := json.Unmarshal(raw, &v); err != nil || v < 0 {
		return 0, fmt.Errorf("broker: parse %s: %s: %q", path, logOffsetKey, raw)
	}
	return v, nil
}

// appendLogOffset appends `,"keelLogOffset":N` when there is a point.
func appendLogOffset(out []byte, logEnd int64) []byte {
	if logEnd <= 0 {
		return out
	}
	out = append(out, `,"`+logOffsetKey+`":`...)
	return strconv.AppendInt(out, logEnd, 10)
}

// logFlight appends the record of the batch in flight (saveMu held) on a
// master serving slaves, and moves the snapshot point past it.
func (t *configTable[T]) logFlight() (logged bool, err error) {
	if t.sys == nil {
		return false, nil
	}
	end, logged, err := t.sys(t.flight.ver, t.flight.ops)
	if logged {
		t.mu.Lock()
		t.logEnd = max(t.logEnd, end)
		t.mu.Unlock()
	}
	return logged, err
}

// markReplayed records that memory holds what the file does not (a
// logged change whose file write failed): the next flushReplayed writes
// it.
func (t *configTable[T]) markReplayed(yes bool) {
	if yes {
		t.mu.Lock()
		t.replayed = true
		t.mu.Unlock()
	}
}

// apply sets the table's entries from a config record ending at end.
func (t *configTable[T]) apply(r *record.SystemRecord, end int64) error {
	vals := make([]T, len(r.Configs))
	for i, c := range r.Configs {
		if c.Config == nil {
			continue
		}
		if err := json.Unmarshal(c.Config, &vals[i]); err != nil {
			return fmt.Errorf("core: %v record: entry %q: %w", r.Kind, c.Name, err)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, c := range r.Configs {
		if c.Config == nil {
			delete(t.m, c.Name)
			delete(t.enc, c.Name)
			continue
		}
		t.m[c.Name], t.enc[c.Name] = vals[i], append([]byte(nil), c.Config...)
	}
	t.ver = DataVersion{Timestamp: r.VersionTimestamp, Counter: r.VersionCounter}
	t.logEnd = max(t.logEnd, end)
	t.replayed = true
	return nil
}

// flushReplayed writes the table if applied records changed it since
// the file was written.
func (t *configTable[T]) flushReplayed() error {
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	t.mu.Lock()
	if !t.replayed {
		t.mu.Unlock()
		return nil
	}
	t.replayed = false
	data := t.encodeLocked(&pendingBatch[T]{ver: t.ver})
	t.mu.Unlock()
	if err := writeFileAtomic(t.fs, t.path, data); err != nil {
		t.markReplayed(true)
		return err
	}
	return nil
}

// sysState is the core's side of the system records.
type sysState struct {
	// serving is set once the start's replay is done; from then on a
	// master ignores its own records (its memory is ahead of them) and a
	// replica applies every record.
	serving atomic.Bool
	replica bool
	writer  *sysWriter  // a master serving slaves (syslog.go); set before it serves
	delay   *delayTable // a replica's copy of the schedule cursors (delay.go)
}

// loadMetadata loads the three tables and replays the system records
// after their snapshot points; then it subscribes to the records to
// come (a replica applies them).
func (b *Broker) loadMetadata() error {
	b.sys.replica = b.st.Replica()
	if b.sys.replica {
		b.offsets.local = make(map[offsetKey]int64)
		b.sys.delay = newDelayTable(b.cfg.FS, b.cfg.DataDir)
		if err := b.sys.delay.load(); err != nil {
			return err
		}
	}
	if err := b.topics.load(); err != nil {
		return err
	}
	if err := b.groups.load(); err != nil {
		return err
	}
	if err := b.offsets.load(); err != nil {
		return err
	}
	// A point beyond the log's end (the log lost an unsynced tail the
	// file had seen) is pulled back to it, and the file rewritten with it
	// before anything is logged: the records written there after this
	// start must not be taken for ones the file holds.
	logEnd := b.st.Offset(store.Written)
	pulledBack := false
	pull := func(p *int64) bool {
		if *p > logEnd {
			*p, pulledBack = logEnd, true
			return true
		}
		return false
	}
	b.topics.mu.Lock()
	if pull(&b.topics.logEnd) {
		b.topics.replayed = true
	}
	from := b.topics.logEnd
	b.topics.mu.Unlock()
	b.groups.mu.Lock()
	if pull(&b.groups.logEnd) {
		b.groups.replayed = true
	}
	from = min(from, b.groups.logEnd)
	b.groups.mu.Unlock()
	b.offsets.mu.Lock()
	if pull(&b.offsets.logEnd) {
		b.offsets.version++
	}
	from = min(from, b.offsets.logEnd)
	b.offsets.mu.Unlock()
	if d := b.sys.delay; d != nil {
		d.mu.Lock()
		if pull(&d.logEnd) {
			d.dirty = true
		}
		from = min(from, d.logEnd)
		d.mu.Unlock()
	}
	for _, t := range b.cfg.Tables {
		p, ok := t.SnapshotPoint()
		if !ok {
			continue
		}
		if p > logEnd {
			t.PullBack(logEnd)
			p, pulledBack = logEnd, true
		}
		from = min(from, p)
	}
	noPoints := from == 0 && !b.sys.replica
	if noPoints && !b.cfg.SystemRecords {
		// No file has a snapshot point and this broker does not log: it
		// never logged with these files (a master gives them points at
		// its first start), so there is nothing to replay; do not read a
		// log of messages only. A master in that state reads its log once
		// (its first records may be there, with no file written yet).
		from = b.st.VisibleOffset()
	}
	end, err := b.st.SubscribeSystem(from, b.onSystem)
	if err != nil {
		return fmt.Errorf("core: replay metadata from the CommitLog: %w", err)
	}
	for _, t := range b.cfg.Tables {
		if err := t.Replayed(end); err != nil {
			return fmt.Errorf("core: replay metadata from the CommitLog: %w", err)
		}
	}
	b.sys.serving.Store(true)
	firstLogged := noPoints && b.cfg.SystemRecords
	b.advanceSnapshotPoints(end, firstLogged)
	if firstLogged || pulledBack {
		// The first start that logs, or points pulled back: write the
		// files' points now, so that the records logged from here on are
		// replayed after a crash.
		if err := b.FlushOffsets(); err != nil {
			return err
		}
	}
	b.log.Info("metadata replayed from the CommitLog", "from", from, "to", end, "replica", b.sys.replica)
	if b.cfg.SystemRecords && !b.sys.replica {
		b.startSystemLog()
	}
	return nil
}

// onSystem is the store's SystemFunc.
func (b *Broker) onSystem(phys, end int64, body []byte) error {
	if b.sys.serving.Load() && !b.sys.replica {
		return nil // a master's own record: memory is ahead of it
	}
	r, err := record.DecodeSystem(body)
	if err != nil {
		return err
	}
	switch r.Kind {
	case record.KindTopicConfig:
		if phys < b.topics.snapshotPoint() {
			return nil
		}
		if err := b.topics.apply(r, end); err != nil {
			return err
		}
		if b.sys.replica {
			if err := b.deleteReplicatedTopics(r, end); err != nil {
				return err
			}
		}
		if b.sys.serving.Load() {
			b.announce()
		}
	case record.KindGroupConfig:
		if phys < b.groups.snapshotPoint() {
			return nil
		}
		return b.groups.apply(r, end)
	case record.KindOffsets, record.KindOffsetsDelete:
		b.offsets.apply(r, phys, end)
	case record.KindDelayProgress:
		if b.sys.delay != nil { // a master's schedule service has its own file
			b.sys.delay.apply(r, phys, end)
		}
	case record.KindKafkaTxn:
		// The Kafka door's transaction coordinator: the door reads these
		// back itself when it starts (store.ScanSystem); nothing of the
		// core's.
	default:
		if t := b.tableOf(r.Kind); t != nil {
			return t.Apply(phys, end, r)
		}
		return fmt.Errorf("core: system record of %v: %w", r.Kind, errors.ErrUnsupported)
	}
	return nil
}

// deleteReplicatedTopics does in a replica's store what the master's
// DeleteTopic did for each topic the record removes: the topic's stored
// records before the record get the store's tombstone and its
// ConsumeQueues are dropped, so that they are never served or
// dispatched again (also after a restart). Runs in the SystemFunc.
func (b *Broker) deleteReplicatedTopics(r *record.SystemRecord, end int64) error {
	for _, c := range r.Configs {
		if c.Config != nil {
			continue
		}
		if err := b.st.DeleteReplicatedTopic(c.Name, end); err != nil {
			return fmt.Errorf("core: delete topic %s as the master did: %w", c.Name, err)
		}
		b.log.Info("topic deleted as on the master", "topic", c.Name)
	}
	return nil
}

func (t *configTable[T]) snapshotPoint() int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.logEnd
}

// apply applies an offsets record at phys ending at end, unless the
// file already holds it.
func (t *offsetTable) apply(r *record.SystemRecord, phys, end int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if phys < t.logEnd {
		return
	}
	switch r.Kind {
	case record.KindOffsets:
		for _, o := range r.Offsets {
			t.m[offsetKey{o.Group, o.Topic, o.QueueID}] = o.Offset
		}
		t.confirmLocalLocked(r.Offsets)
	case record.KindOffsetsDelete:
		for k := range t.m {
			if deleteMatches(r, k) {
				delete(t.m, k)
				delete(t.advancedMs, k)
			}
		}
		for k := range t.local {
			if deleteMatches(r, k) {
				delete(t.local, k)
			}
		}
	}
	t.logEnd = end
	t.version++
}

// logDelete appends the record of an offsets deletion (group or topic
// "" = every one, queue -1 = every queue) on a master serving slaves,
// after the commits captured before it. flushMu is held.
func (t *offsetTable) logDeleteLocked(group, topic string, queueID int32) error {
	if t.sys == nil {
		return nil
	}
	if err := t.logDirtyLocked(); err != nil {
		return err
	}
	end, logged, err := t.sys(&record.SystemRecord{Kind: record.KindOffsetsDelete, Group: group, Topic: topic, QueueID: queueID})
	if logged {
		t.mu.Lock()
		t.logEnd = max(t.logEnd, end)
		t.mu.Unlock()
	}
	return err
}

// logDirtyLocked appends the offsets committed since the last record
// (flushMu held). Entries of a record the log refused are kept for the
// next flush, unless committed again meanwhile.
func (t *offsetTable) logDirtyLocked() error {
	if t.sys == nil {
		return nil
	}
	t.mu.Lock()
	dirty := t.dirty
	t.dirty = make(map[offsetKey]int64)
	t.mu.Unlock()
	if len(dirty) == 0 {
		return nil
	}
	r := &record.SystemRecord{Kind: record.KindOffsets, Offsets: make([]record.OffsetEntry, 0, len(dirty))}
	for k, off := range dirty {
		r.Offsets = append(r.Offsets, record.OffsetEntry{Group: k.group, Topic: k.topic, QueueID: k.queueID, Offset: off})
	}
	end, logged, err := t.sys(r)
	t.mu.Lock()
	defer t.mu.Unlock()
	if logged {
		t.logEnd = max(t.logEnd, end)
		return err
	}
	for k, off := range dirty {
		if _, again := t.dirty[k]; !again {
			t.dirty[k] = off
		}
	}
	return err
}

// rescanBytes bounds the replay at the next start: a table whose snapshot
// point is further behind the replay's end is written again with the end
// as its point at the next FlushOffsets (every record below it is
// applied), so that a table that does not change does not make every
// start scan the log from its old point (or from the log's start).
const rescanBytes = 64 << 20

func (b *Broker) advanceSnapshotPoints(end int64, force bool) {
	advance := func(p *int64) bool {
		if end-*p <= rescanBytes && !(force && *p < end) {
			return false
		}
		*p = end
		return true
	}
	b.topics.mu.Lock()
	if advance(&b.topics.logEnd) {
		b.topics.replayed = true
	}
	b.topics.mu.Unlock()
	b.groups.mu.Lock()
	if advance(&b.groups.logEnd) {
		b.groups.replayed = true
	}
	b.groups.mu.Unlock()
	b.offsets.mu.Lock()
	if advance(&b.offsets.logEnd) {
		b.offsets.version++
	}
	b.offsets.mu.Unlock()
	if d := b.sys.delay; d != nil {
		d.mu.Lock()
		if advance(&d.logEnd) {
			d.dirty = true
		}
		d.mu.Unlock()
	}
}

// deleteMatches reports whether an offsets delete record covers k.
func deleteMatches(r *record.SystemRecord, k offsetKey) bool {
	return (r.Group == "" || k.group == r.Group) && (r.Topic == "" || k.topic == r.Topic) && (r.QueueID < 0 || k.queueID == r.QueueID)
}
