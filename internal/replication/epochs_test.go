package replication

import (
	"errors"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

func TestCheckDivergence(t *testing.T) {
	master := History{{1, 0}, {2, 1000}, {4, 5000}}
	tests := []struct {
		name    string
		replica History
		end     int64
		ok      bool
	}{
		{"empty replica", nil, 0, true},
		{"prefix in first epoch", History{{1, 0}}, 700, true},
		{"first epoch complete", History{{1, 0}}, 1000, true},
		{"first epoch longer than the master's", History{{1, 0}}, 1200, false},
		{"later epoch", History{{1, 0}, {2, 1000}}, 3000, true},
		{"newest epoch up to master end", History{{1, 0}, {2, 1000}, {4, 5000}}, 6000, true},
		{"past master end", History{{1, 0}, {2, 1000}, {4, 5000}}, 6001, false},
		{"epoch the master never had", History{{1, 0}, {3, 1000}}, 2000, false},
		{"same epoch other start", History{{1, 0}, {2, 900}}, 950, false},
		{"epoch recorded ahead of its bytes", History{{1, 0}, {3, 2000}}, 900, true},
		{"bytes without history", nil, 10, false},
	}
	for _, tc := range tests {
		err := CheckDivergence(tc.replica, tc.end, master, 6000)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrDiverged)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestHistoryDurable: the epoch file survives a power loss once saved,
// a corrupt file is an error (never an empty history), and a failed save
// is reported.
func TestHistoryDurable(t *testing.T) {
	fs := vfs.NewMem()
	path := "/d/replication/epochs"
	if err := vfs.MkdirAllDurable(fs, "/d/replication", 0o700); err != nil {
		t.Fatal(err)
	}
	if h, err := LoadHistory(fs, path); err != nil || len(h) != 0 {
		t.Fatalf("missing file: %v %v", h, err)
	}
	want := History{{1, 0}, {2, 4096}}
	if err := SaveHistory(fs, path, want); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	h, err := LoadHistory(fs, path)
	if err != nil || len(h) != 2 || h[1] != want[1] {
		t.Fatalf("after power loss: %v %v", h, err)
	}
	if err := SaveHistory(fs, path, History{{2, 0}, {1, 5}}); err == nil {
		t.Fatal("saved an invalid history")
	}
	if err := vfs.WriteFileDurable(fs, path, []byte("keel-epochs 1\n1 x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHistory(fs, path); err == nil {
		t.Fatal("corrupt epoch file loaded")
	}
	efs := vfs.NewErrorFS(fs)
	efs.InjectSyncError(path + ".tmp")
	if err := SaveHistory(efs, path, want); err == nil {
		t.Fatal("failed fsync not reported")
	}
}
