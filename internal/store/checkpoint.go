package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// checkpoint is the content of <Dir>/checkpoint: how far each structure is
// known durable. It is rewritten crash-safely (temp file, fdatasync,
// rename, directory sync), so a reader sees either the old or the new one.
//
//	off size field
//	  0    4 magic "KCKP"
//	  4    4 version (1)
//	  8    8 CommitLog flushed offset
//	 16    8 ConsumeQueue flushed offset (CommitLog offset fully dispatched and flushed)
//	 24    8 index flushed offset (same meaning for the index)
//	 32    8 store timestamp of the last dispatched record (ms)
//	 40    8 wall time the checkpoint was written (ms)
//	 48    4 CRC32-C of bytes 0..48
type checkpoint struct {
	PhysFlushed   int64
	CQFlushed     int64
	IndexFlushed  int64
	LastStoreTsMs int64
	WrittenAtMs   int64
}

const (
	checkpointBytes   = 52
	checkpointMagic   = "KCKP"
	checkpointVersion = 1
	checkpointName    = "checkpoint"
)

var errNoCheckpoint = errors.New("store: no checkpoint")

func (c checkpoint) encode() []byte {
	b := make([]byte, checkpointBytes)
	copy(b, checkpointMagic)
	be := binary.BigEndian
	be.PutUint32(b[4:], checkpointVersion)
	be.PutUint64(b[8:], uint64(c.PhysFlushed))
	be.PutUint64(b[16:], uint64(c.CQFlushed))
	be.PutUint64(b[24:], uint64(c.IndexFlushed))
	be.PutUint64(b[32:], uint64(c.LastStoreTsMs))
	be.PutUint64(b[40:], uint64(c.WrittenAtMs))
	be.PutUint32(b[48:], commitlog.Checksum(b[:48]))
	return b
}

func decodeCheckpoint(b []byte) (checkpoint, error) {
	be := binary.BigEndian
	if len(b) != checkpointBytes || string(b[:4]) != checkpointMagic {
		return checkpoint{}, fmt.Errorf("store: checkpoint: bad size %d or magic", len(b))
	}
	if v := be.Uint32(b[4:]); v != checkpointVersion {
		return checkpoint{}, fmt.Errorf("store: checkpoint: unsupported version %d", v)
	}
	if be.Uint32(b[48:]) != commitlog.Checksum(b[:48]) {
		return checkpoint{}, errors.New("store: checkpoint: crc mismatch")
	}
	c := checkpoint{
		PhysFlushed:   int64(be.Uint64(b[8:])),
		CQFlushed:     int64(be.Uint64(b[16:])),
		IndexFlushed:  int64(be.Uint64(b[24:])),
		LastStoreTsMs: int64(be.Uint64(b[32:])),
		WrittenAtMs:   int64(be.Uint64(b[40:])),
	}
	if c.PhysFlushed < 0 || c.CQFlushed < 0 || c.IndexFlushed < 0 {
		return checkpoint{}, errors.New("store: checkpoint: negative offset")
	}
	return c, nil
}

// readCheckpoint returns errNoCheckpoint if the file does not exist.
func readCheckpoint(fs vfs.FS, dir string) (checkpoint, error) {
	path := filepath.Join(dir, checkpointName)
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return checkpoint{}, errNoCheckpoint
	}
	if err != nil {
		return checkpoint{}, fmt.Errorf("store: open %s: %w", path, err)
	}
	defer f.Close()
	b := make([]byte, checkpointBytes+1)
	n, err := f.ReadAt(b, 0)
	if n == 0 && err != nil && !errors.Is(err, os.ErrClosed) {
		return decodeCheckpoint(nil)
	}
	return decodeCheckpoint(b[:n])
}

// writeCheckpoint replaces the checkpoint durably.
func writeCheckpoint(fs vfs.FS, dir string, c checkpoint) error {
	if err := vfs.WriteFileDurable(fs, filepath.Join(dir, checkpointName), c.encode(), 0o600); err != nil {
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	return nil
}
