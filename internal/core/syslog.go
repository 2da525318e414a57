package core

// Metadata in the CommitLog (docs/replication.md, "What travels with the
// log").
//
// A master that serves slaves (Config.SystemRecords) writes every change
// of its topics, subscription groups and committed offsets as a system
// record (package record) to its CommitLog, so that the change reaches
// the slaves with the messages, in log order, and is truncated with them.
// The JSON files stay the base: each holds, beside its table, the log
// offset its content reflects (its snapshot point, "keelLogOffset"), and
// at start the core replays the system records from each file's point
// on (apply.go). Rules:
//
//   - Topics and groups: a change is appended and flushed (locally: the
//     durability its file gives) before its file is written, by the one
//     goroutine writing that table, so records of a table are in the
//     order of its file writes and the file's point is the end of its
//     last record. It does not wait for the slaves: the broker changes
//     its tables itself (built-in and auto-created topics and groups),
//     and must not stop while no slave is in sync; and any send
//     acknowledged after the change was replicated with everything
//     before it in the log, the change included. A change the log
//     refuses is dropped like one whose file write failed; one that is in
//     the log but whose flush failed stands (the log holds it) and its
//     caller gets the error.
//   - Offsets: commits are coalesced in memory and appended as one record
//     per FlushOffsets (every OffsetFlushInterval, and before a front door
//     acknowledges a commit as durable: the Kafka door's OffsetCommit),
//     which waits until the record is Confirmed (replicated on a
//     SYNC_MASTER), so an acknowledged durable commit is on the slaves
//     before the ack; without an in-sync slave the flush reports an error
//     (the record stays in the log and reaches the slaves later). Deleting a topic's or group's offsets is a record of its own,
//     after the commits captured before it.
//   - On the master its own records are not applied again (its memory is
//     ahead of them); they are applied at start, from the snapshot points.
//     On a replica every record is applied as the dispatcher reaches it,
//     and the files are written from memory at the next FlushOffsets with
//     the point reached.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
)

// maxSystemBodyBytes bounds the body of one system record: bigger
// changes are split into several records.
const maxSystemBodyBytes = 256 << 10

// systemConfirmTimeout bounds the wait for a system record's
// confirmation when the store has no replication timeout of its own.
const systemConfirmTimeout = 10 * time.Second

// sysWriter appends system records for a master's core.
type sysWriter struct {
	st      *store.Store
	timeout time.Duration
}

// errNotLogged wraps the error of a system record the log did not take.
var errNotLogged = errors.New("core: metadata change not written to the CommitLog")

// write appends the records for r (split if large) and waits until they
// reach mark (Flushed or Confirmed). end is the offset after the last
// record written; logged reports whether every record was written (then
// the change is in the log even if err reports a wait that failed or
// timed out).
func (w *sysWriter) write(r *record.SystemRecord, mark store.Watermark) (end int64, logged bool, err error) {
	for _, part := range splitSystem(r) {
		rec, err := record.AppendSystemRecord(nil, part)
		if err != nil {
			return end, false, fmt.Errorf("%w: %w", errNotLogged, err)
		}
		res, _, e := w.st.AppendRecord(context.Background(), rec)
		if res.Status == store.PutDiskFull {
			// Lack of space, as a file write would report it (diskfull.go
			// keeps auto-created groups in memory then).
			return end, false, fmt.Errorf("%w: %w: %w", errNotLogged, syscall.ENOSPC, res.Err)
		}
		if !res.OK() {
			return end, false, fmt.Errorf("%w: %v: %w", errNotLogged, res.Status, res.Err)
		}
		end = e
	}
	if err := w.st.WaitFor(context.Background(), mark, end, w.timeout); err != nil {
		return end, true, fmt.Errorf("core: metadata change written to the CommitLog but not %v: %w", mark, err)
	}
	return end, true, nil
}

// splitSystem splits r into records whose bodies stay near
// maxSystemBodyBytes. Parts of a config change all carry its version.
func splitSystem(r *record.SystemRecord) []*record.SystemRecord {
	var out []*record.SystemRecord
	switch r.Kind {
	case record.KindOffsets:
		size, from := 0, 0
		for i, o := range r.Offsets {
			size += len(o.Group) + len(o.Topic) + 16
			if size >= maxSystemBodyBytes {
				out = append(out, &record.SystemRecord{Kind: r.Kind, Offsets: r.Offsets[from : i+1]})
				size, from = 0, i+1
			}
		}
		if from < len(r.Offsets) || len(out) == 0 {
			out = append(out, &record.SystemRecord{Kind: r.Kind, Offsets: r.Offsets[from:]})
		}
	case record.KindTopicConfig, record.KindGroupConfig:
		size, from := 0, 0
		for i, c := range r.Configs {
			size += len(c.Name) + len(c.Config) + 6
			if size >= maxSystemBodyBytes {
				p := *r
				p.Configs = r.Configs[from : i+1]
				out = append(out, &p)
				size, from = 0, i+1
			}
		}
		if from < len(r.Configs) || len(out) == 0 {
			p := *r
			p.Configs = r.Configs[from:]
			out = append(out, &p)
		}
	default:
		out = append(out, r)
	}
	return out
}

// startSystemLog installs the record writer on the tables of a master
// that serves slaves.
func (b *Broker) startSystemLog() {
	timeout := systemConfirmTimeout
	if t := b.st.ConfirmTimeout(); t > 0 {
		timeout = t
	}
	w := &sysWriter{st: b.st, timeout: timeout}
	b.sys.writer = w
	b.topics.sys = func(ver DataVersion, ops map[string]pendingOp[TopicConfig]) (int64, bool, error) {
		return w.write(configRecord(record.KindTopicConfig, ver, ops), store.Flushed)
	}
	b.groups.sys = func(ver DataVersion, ops map[string]pendingOp[GroupConfig]) (int64, bool, error) {
		return w.write(configRecord(record.KindGroupConfig, ver, ops), store.Flushed)
	}
	b.offsets.sys = func(r *record.SystemRecord) (int64, bool, error) { return w.write(r, store.Confirmed) }
	b.offsets.mu.Lock()
	b.offsets.dirty = make(map[offsetKey]int64)
	b.offsets.mu.Unlock()
}

func configRecord[T any](kind record.Kind, ver DataVersion, ops map[string]pendingOp[T]) *record.SystemRecord {
	r := &record.SystemRecord{Kind: kind, VersionTimestamp: ver.Timestamp, VersionCounter: ver.Counter}
	for _, name := range slices.Sorted(maps.Keys(ops)) {
		r.Configs = append(r.Configs, record.ConfigEntry{Name: name, Config: ops[name].enc})
	}
	return r
}
