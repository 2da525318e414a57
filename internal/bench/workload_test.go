package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseWorkload(t *testing.T) {
	w, err := Parse(`
name: x
mode: produce-consume
flushDiskType: SYNC_FLUSH
topics: 2
queuesPerTopic: 4
messageSize: 2KiB
producers: 3
producerRate: 1500.5
inflightPerProducer: 8
batchSize: 4
consumers: 2
pullBatchSize: 64
duration: 1m
warmup: 2s
targetP99: 3ms
targetMsgsPerSec: 40000
`)
	if err != nil {
		t.Fatal(err)
	}
	if w.Name != "x" || w.Mode != ModeProduceConsume || w.FlushDiskType != "SYNC_FLUSH" || w.Topics != 2 ||
		w.QueuesPerTopic != 4 || w.MessageSize != 2048 || w.Producers != 3 || w.ProducerRate != 1500.5 ||
		w.InflightPerProducer != 8 || w.BatchSize != 4 || w.Consumers != 2 || w.PullBatchSize != 64 ||
		w.Duration != time.Minute || w.Warmup != 2*time.Second || w.Targets.P99 != 3*time.Millisecond ||
		w.Targets.MsgsPerSec != 40000 {
		t.Fatalf("parsed %+v", w)
	}
	if w, err = Parse("producerRate: max\n"); err != nil || w.ProducerRate != 0 || w.Mode != ModeProduce {
		t.Fatalf("defaults with max rate: %+v, %v", w, err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "1KiB": 1024, "4 GiB": 4 << 30, "3MiB": 3 << 20, "7B": 7, "1TiB": 1 << 40} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1KB", "1.5MiB", "x", "99999999999TiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

func TestWorkloadValidation(t *testing.T) {
	cases := map[string]struct {
		src  string
		want string // substring of the error
	}{
		"unknown key":        {"topicz: 1\n", `unknown key "topicz"`},
		"bad int":            {"topics: many\n", "topics"},
		"bad duration":       {"duration: 5\n", "duration"},
		"mode":               {"mode: fast\n", "mode"},
		"flush":              {"flushDiskType: sometimes\n", "flushDiskType"},
		"no topics":          {"topics: 0\n", "topics 0"},
		"tiny message":       {"messageSize: 8\n", "messageSize 8"},
		"huge message":       {"messageSize: 5MiB\n", "messageSize"},
		"no producers":       {"producers: 0\n", "producers 0"},
		"negative rate":      {"producerRate: -1\n", "producerRate"},
		"zero inflight":      {"inflightPerProducer: 0\n", "inflightPerProducer 0"},
		"sync and inflight":  {"syncSenders: 8\ninflightPerProducer: 4\n", "exclude each other"},
		"too few senders":    {"producers: 4\nsyncSenders: 2\n", "syncSenders 2"},
		"batch too big":      {"batchSize: 1024\nmessageSize: 8KiB\n", "batch body"},
		"consumers produce":  {"consumers: 1\n", "use mode produce-consume"},
		"no consumers":       {"mode: produce-consume\n", "consumers 0"},
		"too many consumers": {"mode: consume\nconsumers: 9\n", "consumers 9"},
		"zero duration":      {"duration: 0s\n", "duration 0s"},
		"backlog no bytes":   {"mode: backlog\nconsumers: 1\n", "backlogBytes"},
		"bytes not backlog":  {"backlogBytes: 1GiB\n", "backlogBytes"},
		"rateOfMax mode":     {"rateOfMax: 0.5\n", "rateOfMax needs"},
		"rateOfMax range":    {"mode: produce-consume\nconsumers: 1\nrateOfMax: 2\n", "rateOfMax 2"},
		"max-rate with rate": {"mode: max-rate\nconsumers: 1\nproducerRate: 10\n", "the search sets the rate"},
		"search factor":      {"mode: max-rate\nconsumers: 1\nsearchStepFactor: 1\n", "searchStepFactor > 1"},
		"negative target":    {"targetMBPerSec: -3\n", "targets"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(c.src)
			if !errors.Is(err, ErrInvalidWorkload) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrInvalidWorkload containing %q", err, c.want)
			}
		})
	}
}

// TestWorkloadFiles loads every file of bench/workloads: they must parse
// and validate, and carry a flush type and at least one target.
func TestWorkloadFiles(t *testing.T) {
	files, err := filepath.Glob("../../bench/workloads/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no workload files: %v", err)
	}
	names := map[string]bool{}
	for _, f := range files {
		w, err := Load(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if w.Name != strings.TrimSuffix(filepath.Base(f), ".yaml") || names[w.Name] {
			t.Errorf("%s: name %q must be the file name and unique", f, w.Name)
		}
		names[w.Name] = true
		if w.FlushDiskType == "" || w.Targets == (Targets{}) || w.Description == "" {
			t.Errorf("%s: want flushDiskType, description and a target", f)
		}
		q := w
		q.Shorten(QuickDuration)
		if err := q.Validate(); err != nil {
			t.Errorf("%s shortened: %v", f, err)
		}
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(p, []byte("topics: 1\ntopics: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v", err)
	}
	w, err := Load(filepath.Join("..", "..", "bench", "workloads", "sync-one-sender.yaml"))
	if err != nil || w.Name != "sync-one-sender" {
		t.Fatalf("%+v %v", w.Name, err)
	}
}

func TestShorten(t *testing.T) {
	w := DefaultWorkload()
	w.Mode, w.Consumers, w.BacklogBytes, w.Duration = ModeBacklog, 1, 4<<30, 5*time.Minute
	w.Shorten(3 * time.Second)
	if w.Duration != 5*time.Minute || w.BacklogBytes != QuickBacklogBytes || w.Warmup != time.Second {
		t.Fatalf("backlog shortened to %+v", w)
	}
	w = DefaultWorkload()
	w.Mode, w.Consumers = ModeMaxRate, 1
	w.Shorten(3 * time.Second)
	if w.Duration != 3*time.Second || w.SearchStepDuration != time.Second || w.Warmup != time.Second {
		t.Fatalf("max-rate shortened to %+v", w)
	}
}
