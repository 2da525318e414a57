package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/keelmq/keel/internal/vfs"
)

// Cursor file location under Config.Dir.
const (
	cursorDir     = "config"
	cursorName    = "delayOffset.json"
	cursorVersion = 1
	// maxCursorBytes bounds the cursor file read at start.
	maxCursorBytes = 1 << 20
)

// ErrBadCursorFile reports an unreadable or malformed cursor file. It is
// never torn (it is replaced by rename); deleting it makes the service
// deliver every scheduled entry still stored again.
var ErrBadCursorFile = errors.New("schedule: bad cursor file")

type cursorFile struct {
	Version     int                         `json:"version"`
	OffsetTable map[string]map[string]int64 `json:"offsetTable"`
}

type qkey struct {
	topic string
	id    int32
}

// loadCursors reads the cursor file; a missing file is an empty table.
func loadCursors(fsys vfs.FS, dir string) (map[qkey]int64, error) {
	path := filepath.Join(dir, cursorDir, cursorName)
	data, err := readFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[qkey]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("schedule: read %s: %w", path, err)
	}
	var cf cursorFile
	if err := json.Unmarshal(data, &cf); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadCursorFile, path, err)
	}
	if cf.Version != cursorVersion {
		return nil, fmt.Errorf("%w: %s: version %d, want %d", ErrBadCursorFile, path, cf.Version, cursorVersion)
	}
	out := map[qkey]int64{}
	for topic, tab := range cf.OffsetTable {
		if !IsScheduleTopic(topic) {
			return nil, fmt.Errorf("%w: %s: unknown topic %q", ErrBadCursorFile, path, topic)
		}
		for qs, off := range tab {
			q, err := strconv.ParseInt(qs, 10, 32)
			if err != nil || q < 0 || off < 0 || (topic == TimerTopic && q >= TimerQueues) || q >= MaxLevels {
				return nil, fmt.Errorf("%w: %s: bad entry %s queue %q offset %d", ErrBadCursorFile, path, topic, qs, off)
			}
			out[qkey{topic, int32(q)}] = off
		}
	}
	return out, nil
}

func readFile(fsys vfs.FS, path string) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	if n > maxCursorBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, at most %d", ErrBadCursorFile, path, n, maxCursorBytes)
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil && n > 0 {
		return nil, err
	}
	return buf, nil
}

// saveCursors replaces the cursor file crash-safely: temporary file, fsync,
// rename, fsync of the directory.
func saveCursors(fsys vfs.FS, dir string, cursors map[qkey]int64) error {
	cf := cursorFile{Version: cursorVersion, OffsetTable: map[string]map[string]int64{}}
	for k, off := range cursors {
		tab := cf.OffsetTable[k.topic]
		if tab == nil {
			tab = map[string]int64{}
			cf.OffsetTable[k.topic] = tab
		}
		tab[strconv.Itoa(int(k.id))] = off
	}
	data, err := json.Marshal(cf)
	if err != nil {
		return fmt.Errorf("schedule: encode cursors: %w", err)
	}
	cdir := filepath.Join(dir, cursorDir)
	path := filepath.Join(cdir, cursorName)
	if err := vfs.WriteFileDurable(fsys, path, data, 0o600); err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	return nil
}

// ensureCursorDir creates <dir>/config durably: every ancestor is synced,
// so directories MkdirAll created survive a crash (only done on creation).
func ensureCursorDir(fsys vfs.FS, dir string) error {
	cdir := filepath.Join(dir, cursorDir)
	if _, err := fsys.Stat(cdir); err == nil {
		return nil
	}
	if err := vfs.MkdirAllDurable(fsys, cdir, 0o700); err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	return nil
}
