package replication

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/vfs"
)

// Epoch says that the master of epoch Epoch wrote the CommitLog from Start
// on (until the next epoch's start). Every start of a master appends an
// epoch, so bytes a master lost in a crash (and that a replica may hold)
// are told apart from what it writes after.
type Epoch struct {
	Epoch uint32
	Start int64
}

// History is an epoch history: epochs strictly increasing, starts never
// decreasing.
type History []Epoch

// ErrDiverged: the replica holds bytes its master's log does not have at
// the same place (written under an epoch the master does not know, or past
// the end of that epoch on the master). CheckDivergence returns it for a
// log that is not a prefix of the master's (the master then tells the
// replica where to truncate); Slave.Run returns it when the replica cannot
// truncate: no common epoch, a different last record, or a truncation
// that would take back what it showed.
var ErrDiverged = errors.New("replication: replica log diverged from the master's")

// Valid checks the order of h.
func (h History) Valid() error {
	for i := 1; i < len(h); i++ {
		if h[i].Epoch <= h[i-1].Epoch || h[i].Start < h[i-1].Start {
			return fmt.Errorf("replication: epoch history out of order at %d: (%d, %d) after (%d, %d)",
				i, h[i].Epoch, h[i].Start, h[i-1].Epoch, h[i-1].Start)
		}
	}
	return nil
}

// Last returns the newest epoch (zero if h is empty).
func (h History) Last() Epoch {
	if len(h) == 0 {
		return Epoch{}
	}
	return h[len(h)-1]
}

// at returns the index of the epoch that wrote the byte at off: the last
// whose start is <= off (-1 if none).
func (h History) at(off int64) int {
	i := -1
	for j, e := range h {
		if e.Start <= off {
			i = j
		}
	}
	return i
}

// EpochAt returns the epoch writing at off and where it ends (the next
// epoch's start; -1 for the newest, which is open).
func (h History) EpochAt(off int64) (Epoch, int64, bool) {
	i := h.at(off)
	if i < 0 {
		return Epoch{}, 0, false
	}
	end := int64(-1)
	if i+1 < len(h) {
		end = h[i+1].Start
	}
	return h[i], end, true
}

// CheckDivergence decides whether a replica whose log ends at replicaEnd,
// with epoch history replica, may continue from there on a master with
// history master and log end masterEnd. It returns nil if the replica's
// log is a prefix of the master's, else an error wrapping ErrDiverged
// naming where.
func CheckDivergence(replica History, replicaEnd int64, master History, masterEnd int64) error {
	if replicaEnd == 0 {
		return nil
	}
	i := replica.at(replicaEnd - 1)
	if i < 0 {
		return fmt.Errorf("%w: the replica holds %d bytes but no epoch history says whose they are (a data directory of another broker?)", ErrDiverged, replicaEnd)
	}
	last := replica[i]
	for j, e := range master {
		if e != last {
			continue
		}
		end := masterEnd
		if j+1 < len(master) {
			end = master[j+1].Start
		}
		if replicaEnd > end {
			return fmt.Errorf("%w: the replica's epoch %d (from %d) ends at %d, the master's at %d: the replica has %d bytes the master does not",
				ErrDiverged, e.Epoch, e.Start, replicaEnd, end, replicaEnd-end)
		}
		return nil
	}
	return fmt.Errorf("%w: the replica's last epoch %d (from offset %d) is not in the master's history (last %d from %d)",
		ErrDiverged, last.Epoch, last.Start, master.Last().Epoch, master.Last().Start)
}

// historyHeader starts the epoch file.
const historyHeader = "keel-epochs 1\n"

// encodeHistory is the epoch file: the header, then "epoch start" lines.
func encodeHistory(h History) []byte {
	var b bytes.Buffer
	b.WriteString(historyHeader)
	for _, e := range h {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.Start)
	}
	return b.Bytes()
}

func decodeHistory(b []byte) (History, error) {
	s, ok := strings.CutPrefix(string(b), historyHeader)
	if !ok {
		return nil, errors.New("no keel-epochs 1 header")
	}
	var h History
	for n, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if line == "" && n == 0 {
			break
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: %q is not \"epoch start\"", n+2, line)
		}
		e, err1 := strconv.ParseUint(f[0], 10, 32)
		st, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || st < 0 {
			return nil, fmt.Errorf("line %d: %q is not \"epoch start\"", n+2, line)
		}
		h = append(h, Epoch{Epoch: uint32(e), Start: st})
	}
	if len(h) > maxEpochs {
		return nil, fmt.Errorf("%d epochs, more than %d", len(h), maxEpochs)
	}
	return h, h.Valid()
}

// LoadHistory reads the epoch file at path; a missing file is an empty
// history. A file that does not decode is an error (never an empty
// history: that would let diverged bytes pass).
func LoadHistory(fs vfs.FS, path string) (History, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replication: open epoch file: %w", err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("replication: epoch file %s: %w", path, err)
	}
	if size > 32<<20 {
		return nil, fmt.Errorf("replication: epoch file %s: %d bytes is too large", path, size)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, fmt.Errorf("replication: read epoch file %s: %w", path, err)
	}
	h, err := decodeHistory(b)
	if err != nil {
		return nil, fmt.Errorf("replication: epoch file %s: %w", path, err)
	}
	return h, nil
}

// SaveHistory writes h to path durably (temporary file, fsync, rename,
// directory fsync). An error leaves the previous file in place; callers
// treat it as fatal (never continue on an epoch history that may not be
// on disk).
func SaveHistory(fs vfs.FS, path string, h History) error {
	if err := h.Valid(); err != nil {
		return err
	}
	if err := vfs.WriteFileDurable(fs, path, encodeHistory(h), 0o600); err != nil {
		return fmt.Errorf("replication: save epoch file: %w", err)
	}
	return nil
}
