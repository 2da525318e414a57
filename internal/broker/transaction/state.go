package transaction

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/keelmq/keel/internal/vfs"
)

// Cursor file under Config.Dir.
const (
	stateDir      = "config"
	stateName     = "transaction.json"
	stateVersion  = 1
	maxStateBytes = 1 << 16
)

// cursors are the persisted scan positions: every half offset below half
// is decided by an op record stored below op... precisely: every half
// queue offset < half is named by a durable op record, and every op record
// at an op queue offset < op names only half offsets < half.
type cursors struct {
	half, op int64
	written  int64 // CommitLog written offset when computed (not persisted)
}

type stateFile struct {
	Version    int   `json:"version"`
	HalfOffset int64 `json:"halfOffset"`
	OpOffset   int64 `json:"opOffset"`
}

func statePath(dir string) string { return filepath.Join(dir, stateDir, stateName) }

// loadCursors reads the cursor file; a missing file means (0, 0).
func loadCursors(fsys vfs.FS, dir string) (cursors, error) {
	path := statePath(dir)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return cursors{}, nil
	}
	if err != nil {
		return cursors{}, fmt.Errorf("transaction: open %s: %w", path, err)
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return cursors{}, fmt.Errorf("transaction: stat %s: %w", path, err)
	}
	if n > maxStateBytes {
		return cursors{}, fmt.Errorf("%w: %s is %d bytes", ErrBadStateFile, path, n)
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil && n > 0 {
		return cursors{}, fmt.Errorf("transaction: read %s: %w", path, err)
	}
	var sf stateFile
	if err := json.Unmarshal(buf, &sf); err != nil {
		return cursors{}, fmt.Errorf("%w: %s: %v", ErrBadStateFile, path, err)
	}
	if sf.Version != stateVersion || sf.HalfOffset < 0 || sf.OpOffset < 0 {
		return cursors{}, fmt.Errorf("%w: %s: version %d, offsets %d/%d", ErrBadStateFile, path, sf.Version, sf.HalfOffset, sf.OpOffset)
	}
	return cursors{half: sf.HalfOffset, op: sf.OpOffset}, nil
}

// saveCursors replaces the cursor file: temporary file, fsync, rename,
// fsync of the directory (created durably the first time).
func saveCursors(fsys vfs.FS, dir string, c cursors) error {
	cdir := filepath.Join(dir, stateDir)
	if _, err := fsys.Stat(cdir); err != nil {
		if err := vfs.MkdirAllDurable(fsys, cdir, 0o700); err != nil {
			return fmt.Errorf("transaction: %w", err)
		}
	}
	data, _ := json.Marshal(stateFile{Version: stateVersion, HalfOffset: c.half, OpOffset: c.op})
	if err := vfs.WriteFileDurable(fsys, statePath(dir), data, 0o600); err != nil {
		return fmt.Errorf("transaction: %w", err)
	}
	return nil
}

// candidateLocked computes the cursors the in-memory state allows and
// trims what is no longer needed below them: the half cursor is the lowest
// undecided half (or halfSeen), the op cursor the first op naming a half at
// or above it (or opSeen).
func (e *Engine) candidateLocked() cursors {
	h := e.halfSeen
	for o := range e.halves {
		h = min(h, o)
	}
	h = max(h, e.resolved.floor)
	e.resolved.advance(h)
	o := e.opLow
	for ; o < e.opSeen; o++ {
		hi, ok := e.ops[o]
		if !ok || hi >= h {
			break
		}
		delete(e.ops, o)
	}
	e.opLow = o
	return cursors{half: h, op: o}
}

// persist writes the cursor file when it would change, but only cursors
// whose supporting op records are durable: a candidate computed when the
// CommitLog was written up to W is saved once the flushed offset reaches W
// (now, or at the next persist).
func (e *Engine) persist() error {
	e.mu.Lock()
	cand := e.candidateLocked()
	e.mu.Unlock()
	st := e.st.Stats()
	cand.written = st.WrittenOffset
	var save *cursors
	switch {
	case st.FlushedOffset >= cand.written:
		save = &cand
	case e.prevCand != nil && st.FlushedOffset >= e.prevCand.written:
		save = e.prevCand
	}
	e.prevCand = &cand
	if save == nil || (save.half == e.saved.half && save.op == e.saved.op) {
		return nil
	}
	if err := saveCursors(e.cfg.FS, e.cfg.Dir, *save); err != nil {
		return err
	}
	e.saved = *save
	return nil
}
