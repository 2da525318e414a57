package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// logBuffer collects a store's log lines for a test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// groupAt is a consumer-offsets hook: group G consumes T and has consumed
// T/0 up to *offset (nothing of the other queues of T); no group consumes
// any other topic.
func groupAt(offset *int64) ConsumerOffsetsFunc {
	return func() ConsumerOffsets {
		return ConsumerOffsets{"T": {"G": {0: *offset}}}
	}
}

// Disk use above DiskMaxUsedSpaceRatio deletes only what DiskPressureDelete
// allows: by default segments that are expired and consumed; messages a
// group has not consumed, or a queue no group consumes, stay unless the
// policy is PressureDeleteUnconsumed, and then every lost message is logged
// at ERROR with its group and offsets and counted.
func TestPressureDeletesOnlyWhatThePolicyAllows(t *testing.T) {
	for _, c := range []struct {
		name    string
		policy  PressureDelete
		aged    bool  // the oldest segments are past FileReservedTime
		offset  int64 // G's offset on T/0; -1: no hook installed
		deletes bool  // some segment goes
		lost    bool  // ... and it costs unconsumed messages
	}{
		{"default keeps young consumed data", PressureDeleteExpired, false, 60, false, false},
		{"default deletes expired consumed data", PressureDeleteExpired, true, 30, true, false},
		{"default keeps expired unconsumed data", PressureDeleteExpired, true, 5, false, false},
		{"consumed deletes young consumed data", PressureDeleteConsumed, false, 30, true, false},
		{"consumed keeps unconsumed data", PressureDeleteConsumed, false, 5, false, false},
		{"consumed keeps a queue no group consumes", PressureDeleteConsumed, true, -1, false, false},
		{"unconsumed deletes and reports", PressureDeleteUnconsumed, false, 5, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs logBuffer
			clock := newFakeClock() // 10:00: not DeleteWhen
			mem := vfs.NewMem()
			cfg := testConfig(mem)
			cfg.Now, cfg.Logger, cfg.DiskPressureDelete = clock.Now, logs.logger(), c.policy
			s := mustOpen(t, cfg)
			defer s.Close()
			offset := c.offset
			if offset >= 0 {
				s.SetConsumerOffsets(groupAt(&offset))
			}
			var acked []ackedMsg
			for i := range 60 {
				if i == 40 && c.aged {
					clock.Add(cfg.FileReservedTime + time.Hour)
				}
				body := fmt.Sprintf("%02d%s", i, strings.Repeat("x", 4000))
				m := newMsg("T", 0, body, nil)
				put(t, s, m)
				acked = append(acked, ackedMsg{"T", 0, m.QueueOffset, m.PhysOffset, []byte(body)})
			}
			flushAll(t, s)
			total, free, _ := mem.DiskUsage("/data")
			mem.SetCapacity((total - free) * 100 / 80) // 80 %: above 75, below the hard limit
			s.runRetentionOnce()

			lo, st := s.MinOffset("T", 0), s.Stats()
			if got := lo > 0; got != c.deletes {
				t.Fatalf("min offset %d after retention at 80%%: deleted %v, want %v\n%s", lo, got, c.deletes, logs.String())
			}
			if !c.lost {
				if c.offset >= 0 && lo > c.offset {
					t.Fatalf("min offset %d passed G's offset %d", lo, c.offset)
				}
				checkAcked(t, s, acked[min(max(c.offset, 0), 60):], "kept")
				if st.UnconsumedDeleted != 0 || strings.Contains(logs.String(), "level=ERROR") {
					t.Fatalf("unconsumed deleted %d\n%s", st.UnconsumedDeleted, logs.String())
				}
				if !c.deletes && !strings.Contains(logs.String(), "oldest CommitLog segment is kept") {
					t.Fatalf("no warning that the segment was kept\n%s", logs.String())
				}
				return
			}
			if lo <= c.offset || st.UnconsumedDeleted != lo-c.offset || st.UnconsumedDeletedSegments != 1 {
				t.Fatalf("min offset %d, G at %d: counted %d messages in %d segments", lo, c.offset, st.UnconsumedDeleted, st.UnconsumedDeletedSegments)
			}
			want := fmt.Sprintf("T/0 group=G offsets=[%d,%d)", c.offset, lo)
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), want) {
				t.Fatalf("no ERROR line naming %q\n%s", want, logs.String())
			}
			checkAcked(t, s, acked[lo:], "after the deletion")
		})
	}
}

// The disk of the issue, simulated: a small disk filled by a writer while
// retention runs now and then (as every RetentionCheckInterval), a consumer
// group that has read nothing. Writes are refused with DISK_FULL at the
// reserve, before any write runs into ENOSPC; no acknowledged message is
// deleted; every acknowledged message becomes visible and stays readable
// on the full disk.
func TestSmallDiskFilledUntilRefused(t *testing.T) {
	const capacity = 2 << 20
	var logs logBuffer
	mem := vfs.NewMem()
	mem.SetCapacity(capacity)
	efs := vfs.NewErrorFS(mem)
	efs.SetFreeBytes(capacity)
	cfg := testConfig(efs)
	cfg.FlushDiskType = SyncFlush
	cfg.DiskReserveBytes = 64 << 10
	cfg.FlushConsumeQueueInterval = 10 * time.Millisecond
	cfg.Logger = logs.logger()
	s := mustOpen(t, cfg)
	defer s.Close()
	var offset int64 // G has consumed nothing
	s.SetConsumerOffsets(groupAt(&offset))

	var acked []ackedMsg
	refused := 0
	for i := 0; refused < 50; i++ {
		if i > 10_000 {
			t.Fatal("the disk never filled up")
		}
		if i%512 == 0 { // a retention round every 512 KiB written
			s.runRetentionOnce()
		}
		qid := int32(i % 2)
		body := fmt.Sprintf("m%05d-%s", i, strings.Repeat("y", 1000))
		m := newMsg("T", qid, body, map[string]string{"KEYS": fmt.Sprintf("k%d", i)})
		r := s.PutMessage(context.Background(), m)
		if r.OK() {
			acked = append(acked, ackedMsg{"T", qid, m.QueueOffset, m.PhysOffset, []byte(body)})
			continue
		}
		if r.Status != PutDiskFull || !(errors.Is(r.Err, ErrDiskFull) || errors.Is(r.Err, ErrNoSpace)) {
			t.Fatalf("put %d on a filling disk: %v %v, want DISK_FULL", i, r.Status, r.Err)
		}
		refused++
	}
	enospc := efs.NoSpaceErrors()
	perQueue := map[int32]int64{}
	for _, a := range acked {
		perQueue[a.qid]++
	}
	for qid, n := range perQueue { // acknowledged messages become visible
		waitVisible(t, s, "T", qid, n)
	}
	if err := s.persistProgress(); err != nil {
		t.Fatalf("persist on the full disk: %v", err)
	}
	checkDense(t, s, acked, "on the full disk")
	checkAcked(t, s, acked, "on the full disk")
	st := s.Stats()
	if st.MinOffset != 0 || st.UnconsumedDeleted != 0 || st.WriteStalled || !st.DiskFull {
		t.Fatalf("stats on the full disk: %+v", st)
	}
	if enospc != 0 || efs.NoSpaceErrors() != 0 {
		t.Fatalf("writes ran into ENOSPC %d times before the store refused writes, %d in all\n%s", enospc, efs.NoSpaceErrors(), logs.String())
	}
	_, free, _ := efs.DiskUsage("/data")
	t.Logf("acked %d (%d bytes of records), refused %d, %d of %d bytes free at the end, reserve %d",
		len(acked), st.PutBytes, refused, free, capacity, s.reserveBytes(capacity))
}

// The WARN that the oldest segment is kept names the reasons that hold
// now: while the group is behind, that it holds unconsumed messages (and is
// young); once the backlog is consumed, a new line says that the segment is
// kept only for its age under the default policy — not that a group has not
// consumed it.
func TestPressureKeptSaysWhy(t *testing.T) {
	var logs logBuffer
	clock := newFakeClock() // 10:00: not DeleteWhen
	mem := vfs.NewMem()
	cfg := testConfig(mem)
	cfg.Now, cfg.Logger = clock.Now, logs.logger()
	s := mustOpen(t, cfg)
	defer s.Close()
	offset := int64(5)
	s.SetConsumerOffsets(groupAt(&offset))
	for i := range 60 {
		put(t, s, newMsg("T", 0, fmt.Sprintf("%02d%s", i, strings.Repeat("x", 4000)), nil))
	}
	flushAll(t, s)
	total, free, _ := mem.DiskUsage("/data")
	mem.SetCapacity((total - free) * 100 / 80) // 80 %: above 75, below the hard limit
	kept := func() []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "oldest CommitLog segment is kept") {
				out = append(out, l)
			}
		}
		return out
	}

	s.runRetentionOnce()
	s.runRetentionOnce() // the same reasons: not logged again
	lines := kept()
	if len(lines) != 1 || !strings.Contains(lines[0], "has not consumed") || !strings.Contains(lines[0], "younger than fileReservedTime") {
		t.Fatalf("group behind, young data: want one line naming both reasons, got %q", lines)
	}

	offset = 60 // the backlog is consumed
	s.runRetentionOnce()
	lines = kept()
	if len(lines) != 2 {
		t.Fatalf("after the backlog was consumed: %d lines, want a new one\n%s", len(lines), logs.String())
	}
	if l := lines[1]; strings.Contains(l, "not consumed") || !strings.Contains(l, "younger than fileReservedTime") ||
		!strings.Contains(l, "every consumer group has consumed") {
		t.Fatalf("consumed young data kept: %q", l)
	}
	if s.MinOffset("T", 0) != 0 {
		t.Fatal("the default policy deleted young data")
	}
}
