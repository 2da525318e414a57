package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// snapshotFiles returns the content of every file under dir but the lock.
func snapshotFiles(t *testing.T, fs vfs.FS, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		if name == lockName {
			continue
		}
		if fi, err := fs.Stat(path); err == nil && fi.IsDir() {
			for k, v := range snapshotFiles(t, fs, path) {
				out[k] = v
			}
			continue
		}
		out[path] = readAll(t, fs, path)
	}
	return out
}

func diffSnapshots(before, after map[string][]byte) []string {
	var diffs []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			diffs = append(diffs, "removed "+k)
		} else if !bytes.Equal(v, w) {
			diffs = append(diffs, "changed "+k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			diffs = append(diffs, "added "+k)
		}
	}
	return diffs
}

// Damage inside the last acknowledged record looks like a torn tail, but it
// lies before the checkpointed flushed offset: Open refuses, and it must
// leave every byte as it found it (it used to cut the record first). With
// repair on, the cut bytes are kept in quarantine.
func TestRefusedStartChangesNothing(t *testing.T) {
	for _, crashed := range []bool{false, true} {
		fx := newCorruptFixture(t, true)
		if crashed {
			f, err := fx.fs.OpenFile("/data/abort", os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		last := fx.msgs[29]
		fx.patch(t, last.phys+100, 1, func(b []byte) { b[0] ^= 0x40 })
		seg := "/data/commitlog/" + commitlog.SegmentName(last.phys-last.phys%fx.cfg.CommitLogSegmentBytes)
		tail := readAll(t, fx.fs, seg)[last.phys%fx.cfg.CommitLogSegmentBytes:]
		before := snapshotFiles(t, fx.fs, "/data")
		_, err := Open(fx.cfg)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checkpointed flushed offset") || !strings.Contains(err.Error(), "--repair-corruption") {
			t.Fatalf("crashed=%v: damaged last record: %v", crashed, err)
		}
		if d := diffSnapshots(before, snapshotFiles(t, fx.fs, "/data")); len(d) > 0 {
			t.Fatalf("crashed=%v: a refused start changed the data directory: %v", crashed, d)
		}

		fx.cfg.RepairCorruption = true
		s := mustOpen(t, fx.cfg)
		checkAcked(t, s, fx.msgs[:29], "after the repair")
		s.Close()
		names, _ := fx.fs.List("/data/quarantine")
		if len(names) != 1 || !bytes.Equal(readAll(t, fx.fs, "/data/quarantine/"+names[0]), tail) {
			t.Fatalf("crashed=%v: the cut bytes (%d) are not in quarantine: %v", crashed, len(tail), names)
		}
		t.Logf("SUMMARY crashed=%v: refused with %d files unchanged; with repair %d bytes cut, all in quarantine", crashed, len(before), len(tail))
	}
}

// A torn tail after a crash is cut, but only after a durable copy of it.
func TestTornTailIsKeptInQuarantine(t *testing.T) {
	fx := newCorruptFixture(t, false)
	last := fx.msgs[29]
	fx.truncateAt(t, last.phys+50)
	seg := "/data/commitlog/" + commitlog.SegmentName(last.phys-last.phys%fx.cfg.CommitLogSegmentBytes)
	tail := readAll(t, fx.fs, seg)[last.phys%fx.cfg.CommitLogSegmentBytes:]
	s := mustOpen(t, fx.cfg)
	if s.recovered.TornBytes != 50 || s.recovered.Quarantined != 50 {
		t.Fatalf("torn %d bytes, quarantined %d; want 50, 50", s.recovered.TornBytes, s.recovered.Quarantined)
	}
	checkAcked(t, s, fx.msgs[:29], "after the cut")
	s.Close()
	// Only what a completed fdatasync covered counts.
	crashed := fx.fs.CrashClone()
	names, _ := crashed.List("/data/quarantine")
	if len(names) != 1 || !strings.HasSuffix(names[0], ".torn") || !bytes.Equal(readAll(t, crashed, "/data/quarantine/"+names[0]), tail) {
		t.Fatalf("torn tail not kept durably in quarantine: %v", names)
	}
}

// If the copy into quarantine fails, the torn tail is not cut: Open fails
// and the segment is as it was.
func TestTornTailNotCutWhenQuarantineFails(t *testing.T) {
	fx := newCorruptFixture(t, false)
	last := fx.msgs[29]
	fx.truncateAt(t, last.phys+50)
	before := snapshotFiles(t, fx.fs, "/data/commitlog")
	efs := vfs.NewErrorFS(fx.fs)
	efs.InjectSyncError("/data/quarantine/")
	fx.cfg.FS = efs
	if _, err := Open(fx.cfg); err == nil {
		t.Fatal("opened although the torn tail could not be kept")
	}
	if d := diffSnapshots(before, snapshotFiles(t, fx.fs, "/data/commitlog")); len(d) > 0 {
		t.Fatalf("the CommitLog changed: %v", d)
	}
	efs.ClearRules()
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	checkAcked(t, s, fx.msgs[:29], "after the cut")
}
