package vfs

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func TestMkdirAllDurableSurvivesCrash(t *testing.T) {
	fs := NewMem()
	// The control: a plain MkdirAll is lost by a crash (/q is durable,
	// and nothing syncs it again).
	if err := MkdirAllDurable(fs, "/q", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := fs.MkdirAll("/q/plain/x", 0o700); err != nil {
		t.Fatal(err)
	}
	// An earlier unsynced MkdirAll of an ancestor is made durable too.
	if err := fs.MkdirAll("/a", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAllDurable(fs, "/a/b/c", 0o700); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	if !exists(fs, "/q") || exists(fs, "/q/plain") {
		t.Fatal("control: an unsynced directory survived the crash")
	}
	if !exists(fs, "/a/b/c") {
		t.Fatal("MkdirAllDurable directory lost by the crash")
	}
	if err := MkdirAllDurable(fs, "/a/b/c", 0o700); err != nil {
		t.Fatalf("existing directory: %v", err)
	}
}

func TestWriteFileDurableSurvivesCrash(t *testing.T) {
	fs := NewMem()
	if err := MkdirAllDurable(fs, "/d", 0o700); err != nil {
		t.Fatal(err)
	}
	for i, data := range []string{"first version", "v2"} { // the second is shorter: truncation
		if err := WriteFileDurable(fs, "/d/f.json", []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		fs.CrashWith(rand.New(rand.NewPCG(1, uint64(i)))) // torn: keeps a random prefix of anything unsynced
		if got := string(readAll(t, fs, "/d/f.json")); got != data {
			t.Fatalf("after crash %d: %q, want %q", i, got, data)
		}
	}
	// The control: the same bytes written in place without a sync are lost.
	f := mustOpen(t, fs, "/d/f.json", os.O_RDWR)
	mustWrite(t, f, 0, []byte("XX"))
	fs.Crash()
	if got := string(readAll(t, fs, "/d/f.json")); got != "v2" {
		t.Fatalf("control: unsynced write survived: %q", got)
	}
}

// A failure at any step leaves the old content in place, before and after
// a crash, and is returned.
func TestWriteFileDurableFailuresPropagate(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  Op
		path string
	}{
		{"open", OpOpen, ".tmp"},
		{"write", OpWrite, ".tmp"},
		{"sync", OpSync, ".tmp"},
		{"rename", OpRename, ".tmp"},
		{"sync dir", OpSyncDir, "/d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := NewMem()
			fs := NewErrorFS(mem)
			if err := MkdirAllDurable(fs, "/d", 0o700); err != nil {
				t.Fatal(err)
			}
			if err := WriteFileDurable(fs, "/d/f", []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			fs.InjectOnce(tc.ops, tc.path)
			err := WriteFileDurable(fs, "/d/f", []byte("new"), 0o600)
			if !errors.Is(err, ErrInjected) {
				t.Fatalf("injected %s failure not returned: %v", tc.name, err)
			}
			if tc.ops != OpSyncDir && string(readAll(t, fs, "/d/f")) != "old" {
				t.Fatalf("failed write replaced the file: %q", readAll(t, fs, "/d/f"))
			}
			mem.Crash()
			if got := string(readAll(t, mem, "/d/f")); got != "old" {
				t.Fatalf("after crash: %q, want the old content", got)
			}
		})
	}
}

func TestMkdirAllDurableFailuresPropagate(t *testing.T) {
	for _, ops := range []Op{OpMkdir, OpSyncDir} {
		fs := NewErrorFS(NewMem())
		fs.InjectOnce(ops, "/a")
		if err := MkdirAllDurable(fs, "/a/b", 0o700); !errors.Is(err, ErrInjected) {
			t.Fatalf("injected %v failure not returned: %v", ops, err)
		}
	}
}

func TestDurableModesOnOS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x", "y")
	if err := MkdirAllDurable(OS{}, dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "f")
	if err := WriteFileDurable(OS{}, path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "data" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left behind: %v", err)
	}
}
