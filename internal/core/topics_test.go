package broker

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/remoting"
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
	if _, _, err := tbl.createIfAbsent("A", newTopicConfig("A", 4, permRW)); err != nil {
		t.Fatal(err)
	}
	efs.InjectSyncError("topics.json")
	if _, _, err := tbl.createIfAbsent("B", newTopicConfig("B", 4, permRW)); !errors.Is(err, vfs.ErrInjected) {
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

func TestTopicsSurviveRestart(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("Auto", 0, "", []byte("x")), remoting.ResSuccess)
	e.restart()
	tc, ok := e.b.Topic("Auto")
	if !ok || tc.WriteQueueNums != 4 {
		t.Fatalf("topic after restart %+v %v", tc, ok)
	}
	if tpl, ok := e.b.Topic(DefaultTopic); !ok || tpl.Perm != permInherit|permRW {
		t.Fatalf("TBW102 %+v", tpl)
	}
}

func TestValidateTopic(t *testing.T) {
	for name, ok := range map[string]bool{"A-b_c%1|x": true, "": false, "a.b": false, "a b": false, "ü": false} {
		if got := validateTopic(name) == nil; got != ok {
			t.Errorf("%q valid=%v, want %v", name, got, ok)
		}
	}
}

func TestTopicAndGroupLimits(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.MaxTopics = 3; c.MaxGroups = 1 }) // TBW102 + SELF_TEST_TOPIC + 1
	cl := e.dial()
	wantCode(t, cl.sendV1("One", 0, "", []byte("x")), remoting.ResSuccess)
	resp := cl.sendV1("Two", 0, "", []byte("x"))
	wantCode(t, resp, remoting.ResSystemError)
	if !strings.Contains(resp.Remark, "topic limit of 3") {
		t.Fatalf("remark %q", resp.Remark)
	}
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g1", "topic": "One", "queueId": "0", "commitOffset": "1"}, nil), remoting.ResSuccess)
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g2", "topic": "One", "queueId": "0", "commitOffset": "1"}, nil), remoting.ResSystemError)
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
