package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/keelmq/keel/internal/vfs"
)

// A deleted topic leaves a tombstone in <Dir>/deleted-topics: the topic
// and the CommitLog offset up to which its records had been written when
// it was deleted (on a synchronous master some may not be dispatched yet:
// they never will be). Records of the topic below that offset stay in the
// CommitLog until retention removes them, with no ConsumeQueue entry and
// possibly under queue offsets a re-created topic uses again: dispatch
// (recovery's re-dispatch included) skips them, and Check expects no entry
// for them. The file is JSON, replaced crash-safely:
//
//	{"version": 1, "topics": {"<topic>": <CommitLog offset>, ...}}
//
// A tombstone is dropped once retention has removed every segment below
// its offset (at the next deletion).
const tombstoneName = "deleted-topics"

// maxTombstoneFileBytes bounds what readTombstones accepts.
const maxTombstoneFileBytes = 64 << 20

type tombstoneFile struct {
	Version int              `json:"version"`
	Topics  map[string]int64 `json:"topics"`
}

// readTombstones reads <dir>/deleted-topics; a missing file is no
// tombstone.
func readTombstones(fs vfs.FS, dir string) (map[string]int64, error) {
	path := filepath.Join(dir, tombstoneName)
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("store: size of %s: %w", path, err)
	}
	if size > maxTombstoneFileBytes {
		return nil, fmt.Errorf("store: %s is %d bytes, more than %d", path, size, maxTombstoneFileBytes)
	}
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); int64(n) < size {
		return nil, fmt.Errorf("store: read %s: %w", path, err)
	}
	var tf tombstoneFile
	if err := json.Unmarshal(b, &tf); err != nil || tf.Version != 1 {
		return nil, fmt.Errorf("store: %s is not a version 1 tombstone file: %v", path, err)
	}
	if tf.Topics == nil {
		tf.Topics = map[string]int64{}
	}
	return tf.Topics, nil
}

// addTombstone records durably that topic was deleted with its records
// written up to end, dropping tombstones that retention made moot.
// dispatchMu is held.
func (s *Store) addTombstone(topic string, end int64) error {
	next := map[string]int64{topic: max(end, s.tombstones[topic])}
	minPhys := s.log.MinOffset()
	for t, off := range s.tombstones {
		if t != topic && off > minPhys {
			next[t] = off
		}
	}
	b, err := json.Marshal(tombstoneFile{Version: 1, Topics: next})
	if err != nil {
		return fmt.Errorf("store: encode tombstones: %w", err)
	}
	if err := vfs.WriteFileDurable(s.cfg.FS, s.path(tombstoneName), b, 0o600); err != nil {
		return fmt.Errorf("store: write tombstone of topic %s: %w", topic, err)
	}
	s.tombstones = next
	return nil
}

// deletedRecord reports whether the record of topic at phys belongs to a
// deleted incarnation of the topic. dispatchMu is held.
func (s *Store) deletedRecord(topic []byte, phys int64) bool {
	return len(s.tombstones) > 0 && phys < s.tombstones[string(topic)]
}

// removeTopicDir removes the ConsumeQueue directory of a deleted topic,
// durably, once its queues are destroyed. Something else left in it is
// logged and kept: the deletion itself is done.
func (s *Store) removeTopicDir(topic string) {
	root := s.path(consumeQueueDir)
	dir := filepath.Join(root, topic)
	err := s.cfg.FS.Remove(dir)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		err = s.cfg.FS.SyncDir(root)
	}
	if err != nil {
		s.logger.Warn("store: could not remove the consume queue directory of a deleted topic", "topic", topic, "path", dir, "err", err)
	}
}
