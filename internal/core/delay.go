package core

// Delay and timer progress in the log (syslog.go).
//
// The schedule service (internal/broker/schedule) keeps its cursors — per
// queue of SCHEDULE_TOPIC_XXXX and KEEL_SYS_TIMER, the next entry to act
// on — in <DataDir>/config/delayOffset.json. On a master serving slaves
// it also hands each cursor write to LogDelayProgress, after the
// deliveries the cursors cover are flushed, so the progress record comes
// after the re-put messages in the log and the two are truncated
// together. A replica applies the records to a table of its own and
// writes it, in the schedule service's file format and with its snapshot
// point, to the same file at every FlushOffsets: a replica that becomes
// a master starts its schedule service where the old master was, instead
// of delivering every scheduled message still stored again.

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// delayTable is a replica's copy of the schedule service's cursors.
type delayTable struct {
	fs   vfs.FS
	path string

	mu     sync.Mutex
	m      map[string]map[int32]int64
	logEnd int64
	dirty  bool
}

// delayFile is the schedule service's cursor file (version 1) with the
// snapshot point, which the service ignores.
type delayFile struct {
	Version       int                         `json:"version"`
	OffsetTable   map[string]map[string]int64 `json:"offsetTable"`
	KeelLogOffset int64                       `json:"keelLogOffset,omitempty"`
}

func newDelayTable(fsys vfs.FS, dataDir string) *delayTable {
	return &delayTable{fs: fsys, path: filepath.Join(dataDir, "config", "delayOffset.json"), m: map[string]map[int32]int64{}}
}

func (t *delayTable) load() error {
	data, ok, err := readFile(t.fs, t.path)
	if err != nil || !ok {
		return err
	}
	var f delayFile
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("broker: parse %s: %w", t.path, err)
	}
	m := map[string]map[int32]int64{}
	for topic, qs := range f.OffsetTable {
		for q, off := range qs {
			qid, err := strconv.ParseInt(q, 10, 32)
			if err != nil || off < 0 {
				return fmt.Errorf("broker: parse %s: bad entry %s queue %q offset %d", t.path, topic, q, off)
			}
			if m[topic] == nil {
				m[topic] = map[int32]int64{}
			}
			m[topic][int32(qid)] = off
		}
	}
	t.mu.Lock()
	t.m, t.logEnd = m, max(f.KeelLogOffset, 0)
	t.mu.Unlock()
	return nil
}

func (t *delayTable) apply(r *record.SystemRecord, phys, end int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if phys < t.logEnd {
		return
	}
	for _, c := range r.Cursors {
		if t.m[c.Topic] == nil {
			t.m[c.Topic] = map[int32]int64{}
		}
		t.m[c.Topic][c.QueueID] = c.Offset
	}
	t.logEnd, t.dirty = end, true
}

func (t *delayTable) flush() error {
	t.mu.Lock()
	if !t.dirty {
		t.mu.Unlock()
		return nil
	}
	f := delayFile{Version: 1, OffsetTable: map[string]map[string]int64{}, KeelLogOffset: t.logEnd}
	for topic, qs := range t.m {
		f.OffsetTable[topic] = map[string]int64{}
		for q, off := range qs {
			f.OffsetTable[topic][itoa(q)] = off
		}
	}
	t.dirty = false
	t.mu.Unlock()
	data, err := json.Marshal(f)
	if err == nil {
		err = writeFileAtomic(t.fs, t.path, data)
	}
	if err != nil {
		t.mu.Lock()
		t.dirty = true
		t.mu.Unlock()
	}
	return err
}

// DelayProgress returns a replica's copy of the schedule service's
// cursors (topic -> queue -> next offset), as the master last logged
// them; nil on a master.
func (b *Broker) DelayProgress() map[string]map[int32]int64 {
	if b.sys.delay == nil {
		return nil
	}
	b.sys.delay.mu.Lock()
	defer b.sys.delay.mu.Unlock()
	out := make(map[string]map[int32]int64, len(b.sys.delay.m))
	for topic, qs := range b.sys.delay.m {
		out[topic] = make(map[int32]int64, len(qs))
		for q, off := range qs {
			out[topic][q] = off
		}
	}
	return out
}

// LogDelayProgress writes the schedule service's cursors as a system
// record on a master serving slaves (and does nothing otherwise); it
// returns once the record is flushed. The service calls it after the
// deliveries the cursors cover are durable, before its own cursor file.
func (b *Broker) LogDelayProgress(cursors map[string]map[int32]int64) error {
	w := b.sys.writer
	if w == nil {
		return nil
	}
	r := &record.SystemRecord{Kind: record.KindDelayProgress}
	for _, topic := range slices.Sorted(maps.Keys(cursors)) {
		for _, q := range slices.Sorted(maps.Keys(cursors[topic])) {
			r.Cursors = append(r.Cursors, record.QueueCursor{Topic: topic, QueueID: q, Offset: cursors[topic][q]})
		}
	}
	_, _, err := w.write(r, store.Flushed)
	return err
}
