package core

// Crash-safe persistence of the core's small metadata files (topics,
// subscription groups, consumer offsets) under <DataDir>/config.
//
// A file is replaced atomically: the new content is written to <name>.tmp,
// fsynced, renamed over <name>, and the directory is fsynced. After a crash
// the file holds either the old or the new complete content, never a mix. A
// leftover .tmp file is ignored (and overwritten by the next save). A file
// that exists but does not parse is an error at startup: metadata is never
// silently reset.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/keelmq/keel/internal/vfs"
)

// maxConfigFileBytes bounds what the loader reads (a sanity limit: topic and
// offset tables of millions of entries stay far below it).
const maxConfigFileBytes = 1 << 30

// writeFileAtomic replaces path with data crash-safely, creating its
// directory durably the first time.
func writeFileAtomic(fsys vfs.FS, path string, data []byte) error {
	if dir := filepath.Dir(path); !dirExists(fsys, dir) {
		if err := vfs.MkdirAllDurable(fsys, dir, 0o700); err != nil {
			return fmt.Errorf("broker: %w", err)
		}
	}
	if err := vfs.WriteFileDurable(fsys, path, data, 0o600); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	return nil
}

func dirExists(fsys vfs.FS, dir string) bool {
	_, err := fsys.Stat(dir)
	return err == nil
}

// readFile returns the content of path; ok is false if it does not exist.
func readFile(fsys vfs.FS, path string) (data []byte, ok bool, err error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("broker: open %s: %w", path, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, false, fmt.Errorf("broker: stat %s: %w", path, err)
	}
	if size > maxConfigFileBytes {
		return nil, false, fmt.Errorf("broker: %s is %d bytes, over the %d limit", path, size, maxConfigFileBytes)
	}
	data = make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("broker: read %s: %w", path, err)
	}
	return data, true, nil
}

// DataVersion is RocketMQ's DataVersion: bumped on every change of a table.
type DataVersion struct {
	Timestamp int64 `json:"timestamp"`
	Counter   int64 `json:"counter"`
}

// configTable is a persisted name -> config map (topics, subscription
// groups). A mutation returns only once a write of the file holding it has
// completed (fsync included); readers (get, all) see only what the file
// holds. Concurrent mutations share one write (group commit): while a write
// is in flight, new mutations are gathered and the next write covers them
// all. If a write fails, every mutation not yet on disk fails with its error
// and is dropped, so memory never claims what the disk does not hold.
// Values are copied in and out; each entry is encoded once, when it is set.
type configTable[T any] struct {
	fs    vfs.FS
	path  string
	field string // JSON key of the map in the file
	what  string // "topic", "subscription group": for the limit error
	limit int    // most entries; creating one more fails
	now   func() int64

	saveMu sync.Mutex // held by the one goroutine writing the file; before mu

	mu  sync.RWMutex
	m   map[string]T // on disk
	enc map[string]json.RawMessage
	ver DataVersion
	// Mutations not on disk yet: open gathers those the next write takes,
	// flight those of the write in progress (nil if none). A later entry
	// for a name wins; view order: open, flight, m.
	open, flight *pendingBatch[T]

	// Metadata in the log (syslog.go, apply.go). sys, set on a master
	// serving slaves, appends a batch's record before its file is
	// written; logEnd (guarded by mu) is the snapshot point of what m
	// holds; replayed (guarded by mu) says m holds applied records not
	// in the file yet.
	sys      func(DataVersion, map[string]pendingOp[T]) (end int64, logged bool, err error)
	logEnd   int64
	replayed bool
}

// pendingBatch is a set of mutations written together.
type pendingBatch[T any] struct {
	ops  map[string]pendingOp[T]
	ver  DataVersion // of the table with these mutations
	done chan struct{}
	err  error // set before done is closed
}

type pendingOp[T any] struct {
	v   T
	enc json.RawMessage // nil: delete
}

func newConfigTable[T any](fsys vfs.FS, path, field string, now func() int64) *configTable[T] {
	return &configTable[T]{fs: fsys, path: path, field: field, what: field, limit: math.MaxInt, now: now,
		m: make(map[string]T), enc: make(map[string]json.RawMessage)}
}

// withLimit bounds the number of entries.
func (t *configTable[T]) withLimit(what string, limit int) *configTable[T] {
	t.what, t.limit = what, limit
	return t
}

func (t *configTable[T]) load() error {
	data, ok, err := readFile(t.fs, t.path)
	if err != nil || !ok {
		return err
	}
	var file map[string]json.RawMessage
	if err := json.Unmarshal(data, &file); err != nil {
		return fmt.Errorf("broker: parse %s: %w", t.path, err)
	}
	raws := make(map[string]json.RawMessage)
	if raw, ok := file[t.field]; ok {
		if err := json.Unmarshal(raw, &raws); err != nil {
			return fmt.Errorf("broker: parse %s: %s: %w", t.path, t.field, err)
		}
	}
	m := make(map[string]T, len(raws))
	enc := make(map[string]json.RawMessage, len(raws))
	for name, raw := range raws {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("broker: parse %s: %s: %s: %w", t.path, t.field, name, err)
		}
		if enc[name], err = json.Marshal(v); err != nil {
			return fmt.Errorf("broker: encode %s of %s: %w", name, t.path, err)
		}
		m[name] = v
	}
	var ver DataVersion
	if raw, ok := file["dataVersion"]; ok {
		if err := json.Unmarshal(raw, &ver); err != nil {
			return fmt.Errorf("broker: parse %s: dataVersion: %w", t.path, err)
		}
	}
	logEnd, err := parseLogOffset(file, t.path)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.m, t.enc, t.ver, t.logEnd = m, enc, ver, logEnd
	t.mu.Unlock()
	return nil
}

func (t *configTable[T]) get(name string) (T, bool) {
	t.mu.RLock()
	v, ok := t.m[name]
	t.mu.RUnlock()
	return v, ok
}

// all returns a copy of the table and its version.
func (t *configTable[T]) all() (map[string]T, DataVersion) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[string]T, len(t.m))
	for k, v := range t.m {
		out[k] = v
	}
	return out, t.ver
}

// pendingLocked returns the newest mutation of name not on disk yet and the
// batch holding it. The caller holds mu.
func (t *configTable[T]) pendingLocked(name string) (pendingOp[T], *pendingBatch[T], bool) {
	for _, b := range []*pendingBatch[T]{t.open, t.flight} {
		if b != nil {
			if op, ok := b.ops[name]; ok {
				return op, b, true
			}
		}
	}
	return pendingOp[T]{}, nil, false
}

// viewLocked returns name as it will be once every pending mutation is
// written, and the number of entries then. The caller holds mu.
func (t *configTable[T]) viewLocked(name string) (T, bool, *pendingBatch[T]) {
	if op, b, ok := t.pendingLocked(name); ok {
		return op.v, op.enc != nil, b
	}
	v, ok := t.m[name]
	return v, ok, nil
}

func (t *configTable[T]) countLocked() int {
	n := len(t.m)
	for _, b := range []*pendingBatch[T]{t.flight, t.open} {
		if b == nil {
			continue
		}
		for name, op := range b.ops {
			_, before := t.viewBefore(name, b)
			switch {
			case op.enc != nil && !before:
				n++
			case op.enc == nil && before:
				n--
			}
		}
	}
	return n
}

// viewBefore reports whether name exists before batch b's mutations.
func (t *configTable[T]) viewBefore(name string, b *pendingBatch[T]) (T, bool) {
	if b == t.open && t.flight != nil {
		if op, ok := t.flight.ops[name]; ok {
			return op.v, op.enc != nil
		}
	}
	v, ok := t.m[name]
	return v, ok
}

// createIfAbsent adds v under name unless name exists; it returns the value
// now stored and whether it was created. A name whose creation is still
// being written is waited for, so the value returned is always on disk.
func (t *configTable[T]) createIfAbsent(name string, v T) (T, bool, error) {
	if old, ok := t.get(name); ok && !t.hasPending(name) {
		return old, false, nil
	}
	enc, err := json.Marshal(v)
	if err != nil {
		var zero T
		return zero, false, fmt.Errorf("broker: encode %s: %w", name, err)
	}
	for {
		t.mu.Lock()
		cur, ok, pending := t.viewLocked(name)
		if ok && pending == nil {
			t.mu.Unlock()
			return cur, false, nil
		}
		if ok {
			t.mu.Unlock()
			if err := t.commit(pending); err != nil {
				var zero T
				return zero, false, err
			}
			continue // written (or dropped): look again
		}
		b, err := t.addLocked(name, pendingOp[T]{v: v, enc: enc}, true)
		t.mu.Unlock()
		if err == nil {
			err = t.commit(b)
		}
		if err != nil {
			var zero T
			return zero, false, err
		}
		return v, true, nil
	}
}

func (t *configTable[T]) hasPending(name string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, _, ok := t.pendingLocked(name)
	return ok
}

// put sets name to v (create or replace).
func (t *configTable[T]) put(name string, v T) error {
	enc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("broker: encode %s: %w", name, err)
	}
	t.mu.Lock()
	_, had, _ := t.viewLocked(name)
	b, err := t.addLocked(name, pendingOp[T]{v: v, enc: enc}, !had)
	t.mu.Unlock()
	if err != nil {
		return err
	}
	return t.commit(b)
}

// remove deletes name; it reports whether it existed.
func (t *configTable[T]) remove(name string) (bool, error) {
	t.mu.Lock()
	if _, had, _ := t.viewLocked(name); !had {
		t.mu.Unlock()
		return false, nil
	}
	b, err := t.addLocked(name, pendingOp[T]{}, false)
	t.mu.Unlock()
	if err != nil {
		return false, err
	}
	return true, t.commit(b)
}

// addLocked records a mutation in the open batch and returns the batch. A
// creation beyond the limit fails. The caller holds mu.
func (t *configTable[T]) addLocked(name string, op pendingOp[T], creates bool) (*pendingBatch[T], error) {
	if creates && t.countLocked() >= t.limit {
		return nil, Errorf(ErrLimitReached, "%s limit of %d reached; cannot create %s", t.what, t.limit, name)
	}
	if t.open == nil {
		ver := t.ver
		if t.flight != nil {
			ver = t.flight.ver
		}
		t.open = &pendingBatch[T]{ops: make(map[string]pendingOp[T]), ver: ver, done: make(chan struct{})}
	}
	t.open.ops[name] = op
	t.open.ver = DataVersion{Timestamp: t.now(), Counter: t.open.ver.Counter + 1}
	return t.open, nil
}

// commit returns once batch b was written: by this goroutine, which then
// also writes every mutation gathered meanwhile, or by another one.
func (t *configTable[T]) commit(b *pendingBatch[T]) error {
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	select {
	case <-b.done:
		return b.err
	default:
	}
	// b has not been taken by a writer, so it is still the open batch.
	t.mu.Lock()
	t.flight, t.open = t.open, nil
	t.mu.Unlock()
	logged, err := t.logFlight() // apply.go: the record first, on a master serving slaves
	var data []byte
	if err == nil || logged {
		t.mu.Lock()
		data = t.encodeLocked(t.flight)
		t.mu.Unlock()
		if werr := writeFileAtomic(t.fs, t.path, data); werr != nil {
			err = errors.Join(err, werr)
			t.markReplayed(logged)
		}
	}
	t.mu.Lock()
	if err == nil || logged {
		for name, op := range t.flight.ops {
			if op.enc == nil {
				delete(t.m, name)
				delete(t.enc, name)
			} else {
				t.m[name], t.enc[name] = op.v, op.enc
			}
		}
		t.ver = t.flight.ver
	} else if t.open != nil {
		// Mutations gathered meanwhile were checked against the failed
		// ones (existence, limit): drop them too.
		t.open.err = fmt.Errorf("%w (a write of the same table failed)", err)
		close(t.open.done)
		t.open = nil
	}
	t.flight.err = err
	close(t.flight.done)
	t.flight = nil
	t.mu.Unlock()
	return b.err
}

// encodeLocked returns the file content: the table with the mutations of
// b, entries sorted by name. The caller holds mu.
func (t *configTable[T]) encodeLocked(b *pendingBatch[T]) []byte {
	names := make([]string, 0, len(t.m)+len(b.ops))
	size := 64
	for name, e := range t.enc {
		if _, ok := b.ops[name]; !ok {
			names = append(names, name)
			size += len(name) + len(e) + 8
		}
	}
	for name, op := range b.ops {
		if op.enc != nil {
			names = append(names, name)
			size += len(name) + len(op.enc) + 8
		}
	}
	slices.Sort(names)
	ver, _ := json.Marshal(b.ver)
	out := make([]byte, 0, size+len(ver))
	out = append(out, `{"dataVersion":`...)
	out = append(out, ver...)
	out = appendLogOffset(out, t.logEnd)
	out = append(out, `,"`...)
	out = append(out, t.field...)
	out = append(out, `":{`...)
	for i, name := range names {
		if i > 0 {
			out = append(out, ',')
		}
		key, _ := json.Marshal(name)
		out = append(out, key...)
		out = append(out, ':')
		if op, ok := b.ops[name]; ok {
			out = append(out, op.enc...)
		} else {
			out = append(out, t.enc[name]...)
		}
	}
	return append(out, "}}"...)
}
