package store

import (
	"context"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// The data directory in testdata/store-v1 was written by Keel's store as
// released before typed CommitLog records (run with
// KEEL_WRITE_STORE_FIXTURE=1 on that code). Keel must keep opening,
// reading and checking it clean without a migration.

const fixtureDir = "testdata/store-v1"

// fixtureConfig is the configuration the fixture was written with; small
// sizes so that it is a few kilobytes and spans several segments.
func fixtureConfig(dir string) Config {
	cfg := DefaultConfig(dir)
	cfg.FS = vfs.OS{}
	cfg.CommitLogSegmentBytes = 64 << 10
	cfg.ConsumeQueueSegmentEntries = 16
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 64, 512
	cfg.MaxMessageBytes = 8 << 10
	cfg.DiskHardLimitRatio, cfg.DiskMaxUsedSpaceRatio = 100, 100
	cfg.FileReservedTime = 100 * 365 * 24 * time.Hour
	cfg.Now = func() time.Time { return time.UnixMilli(1_780_000_000_000) }
	return cfg
}

// fixtureMessage is message i of the fixture, deterministic.
func fixtureMessage(i int) *message.Message {
	topic := []string{"OrderTopic", "PayTopic", "%RETRY%group-a"}[i%3]
	props := map[string]string{
		message.PropTags:    fmt.Sprintf("tag%d", i%4),
		message.PropKeys:    fmt.Sprintf("order-%d k%d", i, i%5),
		message.PropUniqKey: fmt.Sprintf("7F00000100002A9F0000000%05d", i),
	}
	return &message.Message{
		Topic: topic, QueueID: int32(i % 2), Body: []byte(fmt.Sprintf("body %d %s", i, strings.Repeat("x", i*i*2))),
		BornTimestamp: 1_779_999_999_000 + int64(i), Flag: int32(i),
		BornHost:   netip.MustParseAddrPort("10.1.2.3:40000"),
		StoreHost:  netip.MustParseAddrPort("10.1.2.4:10911"),
		Properties: message.EncodeProperties(props),
	}
}

const fixtureMessages = 60

func TestWriteStoreFixture(t *testing.T) {
	if os.Getenv("KEEL_WRITE_STORE_FIXTURE") == "" {
		t.Skip("set KEEL_WRITE_STORE_FIXTURE=1 to rewrite " + fixtureDir)
	}
	if err := os.RemoveAll(fixtureDir); err != nil {
		t.Fatal(err)
	}
	s, err := Open(fixtureConfig(fixtureDir))
	if err != nil {
		t.Fatal(err)
	}
	for i := range fixtureMessages {
		if r := s.PutMessage(context.Background(), fixtureMessage(i)); r.Status != PutOK {
			t.Fatalf("put %d: %v %v", i, r.Status, r.Err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(fixtureDir, lockName))
}

// copyDir copies the fixture so that opening it changes nothing in testdata.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOpensStoreWrittenByV1 opens the fixture, reads every message back
// with its fields, finds keys through the index, writes more and checks
// the directory clean after closing.
func TestOpensStoreWrittenByV1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	copyDir(t, fixtureDir, dir)
	cfg := fixtureConfig(dir)
	if rep, err := Check(cfg); err != nil || !rep.OK() || len(rep.Warnings) > 0 || rep.Records != fixtureMessages {
		t.Fatalf("check of the fixture as written: err %v, problems %v, warnings %v, records %d", err, rep.Problems, rep.Warnings, rep.Records)
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int64{}
	for i := range fixtureMessages {
		want := fixtureMessage(i)
		qkey := fmt.Sprintf("%s/%d", want.Topic, want.QueueID)
		r, err := s.GetMessage(want.Topic, want.QueueID, next[qkey], 1, 1<<20, nil)
		if err != nil || r.Status != Found || len(r.Records) != 1 {
			t.Fatalf("message %d (%s offset %d): %v %v", i, qkey, next[qkey], r, err)
		}
		got, err := message.Decode(r.Records[0])
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if string(got.Body) != string(want.Body) || got.Flag != want.Flag || got.BornTimestamp != want.BornTimestamp ||
			got.Properties != want.Properties || got.QueueOffset != next[qkey] || got.StoreTimestamp != 1_780_000_000_000 {
			t.Fatalf("message %d differs: got %+v", i, got)
		}
		offs, err := s.QueryByKey(want.Topic, fmt.Sprintf("order-%d", i), 4, 0, 1<<62)
		if err != nil || len(offs) != 1 || offs[0] != got.PhysOffset {
			t.Fatalf("message %d by key: %v %v, want [%d]", i, offs, err, got.PhysOffset)
		}
		r.Release()
		next[qkey]++
	}
	put(t, s, fixtureMessage(fixtureMessages))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(cfg)
	if err != nil || !rep.OK() || len(rep.Warnings) > 0 || rep.Records != fixtureMessages+1 {
		t.Fatalf("check after reopening: err %v, problems %v, warnings %v, records %d", err, rep.Problems, rep.Warnings, rep.Records)
	}
}
