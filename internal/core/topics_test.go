package core

import (
	"errors"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

func TestWriteFileAtomicSurvivesCrash(t *testing.T) {
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	path := "/data/config/x.json"
	if err := writeFileAtomic(mem, path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	mem.Crash()
	data, ok, err := readFile(mem, path)
	if err != nil || !ok || string(data) != "one" {
		t.Fatalf("after crash: %q %v %v", data, ok, err)
	}
	if err := writeFileAtomic(mem, path, []byte("two")); err != nil {
		t.Fatal(err)
	}
	mem.Crash()
	data, _, _ = readFile(mem, path)
	if string(data) != "two" {
		t.Fatalf("after second crash: %q", data)
	}
}

func TestConfigTableRollsBackOnWriteError(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.OS{})
	dir := t.TempDir()
	tbl := newConfigTable[TopicConfig](efs, filepath.Join(dir, "config", "topics.json"), "topicConfigTable", func() int64 { return 1 })
	if _, _, err := tbl.createIfAbsent("A", NewTopicConfig("A", 4, PermRW)); err != nil {
		t.Fatal(err)
	}
	efs.InjectSyncError("topics.json")
	if _, _, err := tbl.createIfAbsent("B", NewTopicConfig("B", 4, PermRW)); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("create B: %v, want injected error", err)
	}
	if _, ok := tbl.get("B"); ok {
		t.Fatal("B kept in memory after a failed write")
	}
	efs.ClearRules()
	re := newConfigTable[TopicConfig](vfs.OS{}, filepath.Join(dir, "config", "topics.json"), "topicConfigTable", func() int64 { return 1 })
	if err := re.load(); err != nil {
		t.Fatal(err)
	}
	if _, ok := re.get("A"); !ok {
		t.Fatal("A lost")
	}
	if _, ok := re.get("B"); ok {
		t.Fatal("B on disk")
	}
}

func TestCorruptConfigFileFailsStartup(t *testing.T) {
	dir := t.TempDir()
	if err := writeFileAtomic(vfs.OS{}, filepath.Join(dir, "config", "topics.json"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	tbl := newConfigTable[TopicConfig](vfs.OS{}, filepath.Join(dir, "config", "topics.json"), "topicConfigTable", func() int64 { return 1 })
	if err := tbl.load(); err == nil {
		t.Fatal("corrupt topics.json loaded without error")
	}
}

func TestValidateTopic(t *testing.T) {
	for name, ok := range map[string]bool{"A-b_c%1|x": true, "": false, "a.b": false, "a b": false, "ü": false} {
		if got := ValidateTopic(name) == nil; got != ok {
			t.Errorf("%q valid=%v, want %v", name, got, ok)
		}
	}
}

func TestValidTopicCharsMatchesTheDocumentedPattern(t *testing.T) {
	re := regexp.MustCompile(`^[%|a-zA-Z0-9_-]+$`)
	for c := 0; c < 256; c++ {
		s := "a" + string([]byte{byte(c)}) + "Z"
		if got, want := validTopicChars(s), re.MatchString(s); got != want {
			t.Fatalf("byte %#x: valid %v, pattern says %v", c, got, want)
		}
	}
	for _, s := range []string{"%RETRY%g-1", "T|x", "TopicTest", "a b", "t\x00", "é"} {
		if got, want := validTopicChars(s), re.MatchString(s); got != want {
			t.Fatalf("%q: valid %v, pattern says %v", s, got, want)
		}
	}
}
