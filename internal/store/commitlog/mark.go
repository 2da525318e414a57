package commitlog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/keelmq/keel/internal/vfs"
)

// The flushed mark (see "The flushed mark" in the package documentation):
// a 16-byte file in the log directory holding an offset below which every
// byte of the log was covered by a completed fdatasync. Flush rewrites it
// in place, without a sync of its own, after each fdatasync and before it
// moves the flushed watermark, so after a process kill it holds the end of
// the last completed flush (the page cache keeps what was written) and
// after a power loss some earlier one: a lower bound of the durable log
// either way. After a kill it lags the written end only by what no
// completed flush covered (under SYNC_FLUSH the group commit in flight),
// where the checkpoint lags by a second or more.

// MarkName is the file name of the flushed mark in the log directory.
const MarkName = "flushed"

const (
	markBytes = 16
	// markVersion is the first field of the mark: its format version.
	markVersion = 0x4B464D01 // "KFM" 1
)

// Mark is what ReadMark found.
type Mark struct {
	Offset int64 // every byte of the log below it was fdatasynced
	Found  bool  // a valid mark exists; false: none (a log an earlier release wrote) or an invalid one
	// Invalid says why a mark file exists but cannot be used ("" if
	// valid or missing); the mark is then ignored.
	Invalid string
}

// ReadMark reads the flushed mark of the log directory dir.
func ReadMark(fs vfs.FS, dir string) (Mark, error) {
	f, err := fs.OpenFile(filepath.Join(dir, MarkName), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return Mark{}, nil
	}
	if err != nil {
		return Mark{}, fmt.Errorf("commitlog: open flushed mark: %w", err)
	}
	defer f.Close()
	var b [markBytes]byte
	n, err := f.ReadAt(b[:], 0)
	if n < markBytes && err != nil && err != io.EOF {
		return Mark{}, fmt.Errorf("commitlog: read flushed mark: %w", err)
	}
	return decodeMark(b[:n]), nil
}

func decodeMark(b []byte) Mark {
	switch {
	case len(b) < markBytes:
		return Mark{Invalid: fmt.Sprintf("%d bytes, want %d", len(b), markBytes)}
	case be32(b[0:4]) != markVersion:
		return Mark{Invalid: fmt.Sprintf("unknown version %#x", be32(b[0:4]))}
	case Checksum(b[:12]) != be32(b[12:16]):
		return Mark{Invalid: "checksum mismatch"}
	}
	off := int64(be32(b[4:8]))<<32 | int64(be32(b[8:12]))
	if off < 0 {
		return Mark{Invalid: fmt.Sprintf("negative offset %d", off)}
	}
	return Mark{Offset: off, Found: true}
}

func encodeMark(b *[markBytes]byte, off int64) {
	put32(b[0:4], markVersion)
	put32(b[4:8], uint32(off>>32))
	put32(b[8:12], uint32(off))
	put32(b[12:16], Checksum(b[:12]))
}

// writeMark writes off to the mark (creating the file if needed, durably)
// and, if sync, fdatasyncs it. Callers hold flushMu or run before any
// flusher (Recover).
func (l *Log) writeMark(off int64, sync bool) error {
	if l.mark == nil {
		path := filepath.Join(l.cfg.Dir, MarkName)
		f, err := l.cfg.FS.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("commitlog: open flushed mark %s: %w", path, err)
		}
		l.mark, sync = f, true
		defer func() {
			if err := l.cfg.FS.SyncDir(l.cfg.Dir); err != nil {
				l.logger.Warn("commitlog: sync dir after creating the flushed mark", "err", err)
			}
		}()
	}
	var b [markBytes]byte
	encodeMark(&b, off)
	if _, err := l.mark.WriteAt(b[:], 0); err != nil {
		return fmt.Errorf("commitlog: write flushed mark: %w", err)
	}
	if sync {
		if err := l.mark.Sync(); err != nil {
			return fmt.Errorf("commitlog: fdatasync flushed mark: %w", err)
		}
	}
	l.markAt = off
	return nil
}

// advanceMark records after an fdatasync that the log is durable below w.
// A full disk (possible for an overwrite on a copy-on-write filesystem)
// leaves the older value, still a lower bound; any other failure fails
// the log, as a failed write to a segment does.
func (l *Log) advanceMark(w int64) error {
	err := l.writeMark(w, false)
	if err == nil || !IsNoSpace(err) {
		return err
	}
	if !l.markNoSpace {
		l.markNoSpace = true
		l.logger.Warn("commitlog: disk full: the flushed mark keeps an older offset", "err", err, "mark", l.markAt)
	}
	return nil
}

// closeMark closes the mark's file (Close; a flush still running keeps
// it until done).
func (l *Log) closeMark() error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	if l.mark == nil {
		return nil
	}
	err := l.mark.Close()
	l.mark = nil
	if err != nil {
		return fmt.Errorf("commitlog: close flushed mark: %w", err)
	}
	return nil
}

// recoveredMark records, durably, that the recovered log is durable below
// end. A full disk leaves the older value if that is no higher (still a
// lower bound); one above end must go, or the start fails.
func (l *Log) recoveredMark(end int64) error {
	err := l.writeMark(end, true)
	if err != nil && IsNoSpace(err) && l.markAt <= end {
		l.logger.Warn("commitlog: disk full: the flushed mark keeps an older offset", "err", err, "mark", l.markAt)
		return nil
	}
	return err
}

// lowerMark makes the mark, durably, no higher than off before the log is
// cut there: a mark above the end would call the next writes there durable
// before any fdatasync covered them.
func (l *Log) lowerMark(off int64) error {
	if l.markAt <= off {
		return nil
	}
	return l.writeMark(off, true)
}

// LowerMark makes the flushed mark of the log directory dir, which is not
// open, durably no higher than off (TruncateFiles; tests that model a log
// whose tail was never fdatasynced). An invalid or missing mark is left
// alone: it is ignored anyway.
func LowerMark(fs vfs.FS, dir string, off int64) error {
	m, err := ReadMark(fs, dir)
	if err != nil || !m.Found || m.Offset <= off {
		return err
	}
	f, err := fs.OpenFile(filepath.Join(dir, MarkName), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("commitlog: open flushed mark: %w", err)
	}
	defer f.Close()
	var b [markBytes]byte
	encodeMark(&b, off)
	if _, err := f.WriteAt(b[:], 0); err != nil {
		return fmt.Errorf("commitlog: write flushed mark: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("commitlog: fdatasync flushed mark: %w", err)
	}
	return nil
}
