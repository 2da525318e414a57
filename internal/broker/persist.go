package broker

// Crash-safe persistence of the broker's small metadata files (topics,
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
	"sync"

	"github.com/keelmq/keel/internal/remoting"
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

// dataVersion is RocketMQ's DataVersion: bumped on every change of a table.
type dataVersion struct {
	Timestamp int64 `json:"timestamp"`
	Counter   int64 `json:"counter"`
}

// configTable is a persisted name -> config map (topics, subscription
// groups). Every mutation is written to disk before it returns; a failed
// write rolls the in-memory change back, so memory never claims what the disk
// does not hold. Values are copied in and out.
type configTable[T any] struct {
	fs    vfs.FS
	path  string
	field string // JSON key of the map in the file
	what  string // "topic", "subscription group": for the limit error
	limit int    // most entries; creating one more fails
	now   func() int64

	saveMu sync.Mutex // serialises mutation+save; held before mu

	mu  sync.RWMutex
	m   map[string]T
	ver dataVersion
}

func newConfigTable[T any](fsys vfs.FS, path, field string, now func() int64) *configTable[T] {
	return &configTable[T]{fs: fsys, path: path, field: field, what: field, limit: math.MaxInt, now: now, m: make(map[string]T)}
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
	m := make(map[string]T)
	if raw, ok := file[t.field]; ok {
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("broker: parse %s: %s: %w", t.path, t.field, err)
		}
	}
	var ver dataVersion
	if raw, ok := file["dataVersion"]; ok {
		if err := json.Unmarshal(raw, &ver); err != nil {
			return fmt.Errorf("broker: parse %s: dataVersion: %w", t.path, err)
		}
	}
	t.mu.Lock()
	t.m, t.ver = m, ver
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
func (t *configTable[T]) all() (map[string]T, dataVersion) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[string]T, len(t.m))
	for k, v := range t.m {
		out[k] = v
	}
	return out, t.ver
}

// createIfAbsent adds v under name unless name exists; it returns the value
// now stored and whether it was created.
func (t *configTable[T]) createIfAbsent(name string, v T) (T, bool, error) {
	if old, ok := t.get(name); ok {
		return old, false, nil
	}
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	if old, ok := t.get(name); ok {
		return old, false, nil
	}
	if err := t.mutateAndSave(name, &v); err != nil {
		var zero T
		return zero, false, err
	}
	return v, true, nil
}

// put sets name to v (create or replace).
func (t *configTable[T]) put(name string, v T) error {
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	return t.mutateAndSave(name, &v)
}

// remove deletes name; it reports whether it existed.
func (t *configTable[T]) remove(name string) (bool, error) {
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	if _, ok := t.get(name); !ok {
		return false, nil
	}
	return true, t.mutateAndSave(name, nil)
}

// mutateAndSave sets (v != nil) or deletes (v == nil) name, bumps the
// version and writes the file; on a write error it restores the old state.
// The caller holds saveMu.
func (t *configTable[T]) mutateAndSave(name string, v *T) error {
	t.mu.Lock()
	old, had := t.m[name]
	if v != nil && !had && len(t.m) >= t.limit {
		t.mu.Unlock()
		return protoErrorf(remoting.ResSystemError, "%s limit of %d reached; cannot create %s", t.what, t.limit, name)
	}
	oldVer := t.ver
	if v != nil {
		t.m[name] = *v
	} else {
		delete(t.m, name)
	}
	t.ver = dataVersion{Timestamp: t.now(), Counter: t.ver.Counter + 1}
	t.mu.Unlock()
	if err := t.saveLocked(); err != nil {
		t.mu.Lock()
		if had {
			t.m[name] = old
		} else {
			delete(t.m, name)
		}
		t.ver = oldVer
		t.mu.Unlock()
		return err
	}
	return nil
}

// save writes the current table (used at startup after built-in entries
// changed).
func (t *configTable[T]) save() error {
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	return t.saveLocked()
}

func (t *configTable[T]) saveLocked() error {
	t.mu.RLock()
	data, err := json.Marshal(map[string]any{t.field: t.m, "dataVersion": t.ver})
	t.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("broker: encode %s: %w", t.path, err)
	}
	return writeFileAtomic(t.fs, t.path, data)
}
