package core

// System records of kinds the core does not own (Config.Tables): a
// front door's state that travels with the log the same way as the
// core's tables (the AMQP door's definitions and acknowledgement state).
// The core hands them to their table at start (from the table's snapshot
// point) and, on a replica, as they are dispatched; the door writes them
// on a master. A kind no table owns stops the store, as any kind this
// release does not know.

import "github.com/keelmq/keel/internal/store/record"

// SystemTable keeps the state of the system record kinds it owns, in
// files of its own with a snapshot point (the CommitLog offset up to
// which the files hold every record of its kinds).
type SystemTable interface {
	// Owns reports whether the table keeps records of kind k.
	Owns(k record.Kind) bool
	// SnapshotPoint is where its replay starts; ok false: the table has
	// no point, which means the log holds none of its records before the
	// replay the core does for its own tables (a table writes its point
	// at its first start, in Replayed, before any of its records can be
	// written: a directory of an earlier release has none).
	SnapshotPoint() (point int64, ok bool)
	// PullBack lowers the point to end (the log lost a tail the files
	// had seen); the next Flush writes it.
	PullBack(end int64)
	// Apply applies the record at phys ending at end; a record before
	// the point is the table's to ignore. It runs on the dispatcher (or
	// the start's replay) and must not block on the store.
	Apply(phys, end int64, r *record.SystemRecord) error
	// Replayed is called once the start's replay reached end, before any
	// front door is served: the table writes what the replay changed and
	// may move its point to end.
	Replayed(end int64) error
	// Flush writes what Apply changed since, with the point reached (a
	// replica: every FlushOffsets and at Close).
	Flush() error
}

// tableOf returns the table owning k, or nil.
func (b *Broker) tableOf(k record.Kind) SystemTable {
	for _, t := range b.cfg.Tables {
		if t.Owns(k) {
			return t
		}
	}
	return nil
}
