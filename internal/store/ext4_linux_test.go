package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// mountLoopExt4 creates a sizeBytes ext4 filesystem in a file, mounts it
// through a loop device and returns the mount point; the cleanup unmounts
// it. It skips the test where that is not allowed (not root, no mkfs.ext4,
// no loop devices).
func mountLoopExt4(t *testing.T, sizeBytes int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: mounting a loop ext4 filesystem needs root")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skipf("skipped: no mkfs.ext4 to make a loop ext4 filesystem: %v", err)
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, sizeBytes); err != nil {
		t.Fatal(err)
	}
	// -m 0: no blocks reserved for root, so statfs's free space is what
	// the store (running as root here) can write.
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
		t.Skipf("skipped: mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("skipped: mounting a loop ext4 filesystem is not allowed here: %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// A real ext4 filesystem of 64 MiB in a loop device, filled by SYNC_FLUSH
// batches while a consumer group has read nothing: sends are refused with
// DISK_FULL at the reserve, no write of the CommitLog, a ConsumeQueue or the
// index fails with ENOSPC, nothing is deleted, and every acknowledged
// message is visible and intact on the full disk.
func TestLoopExt4FilledUntilRefused(t *testing.T) {
	mnt := mountLoopExt4(t, 64<<20)
	var logs logBuffer
	cfg := DefaultConfig(filepath.Join(mnt, "store"))
	cfg.FlushDiskType = SyncFlush
	cfg.CommitLogSegmentBytes, cfg.MaxMessageBytes = 4<<20, 64<<10
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 100_000, 400_000
	cfg.FlushConsumeQueueInterval = 10 * time.Millisecond
	cfg.Logger = logs.logger()
	s := mustOpen(t, cfg)
	defer s.Close()
	var offset int64
	s.SetConsumerOffsets(groupAt(&offset))

	var acked []ackedMsg
	refused, written := 0, int64(0)
	for batch := 0; refused < 5; batch++ {
		if batch > 2000 {
			t.Fatal("the disk never filled up")
		}
		if batch%64 == 0 { // a retention round every 8 MiB
			s.runRetentionOnce()
		}
		ms := make([]*message.Message, 32)
		for i := range ms {
			body := fmt.Sprintf("b%05d-%02d-%s", batch, i, strings.Repeat("z", 4000))
			ms[i] = newMsg("T", int32(batch%4), body, map[string]string{"KEYS": fmt.Sprintf("k%d-%d", batch, i)})
		}
		r := s.PutMessages(context.Background(), ms)
		if !r.OK() {
			if r.Status != PutDiskFull || !errors.Is(r.Err, ErrDiskFull) {
				t.Fatalf("batch %d: %v %v, want DISK_FULL from the watermark\n%s", batch, r.Status, r.Err, logs.String())
			}
			refused++
			continue
		}
		for _, m := range ms {
			acked = append(acked, ackedMsg{"T", m.QueueID, m.QueueOffset, m.PhysOffset, m.Body})
			written += int64(m.StoredSize())
		}
	}
	total, freeAtRefusal, err := vfs.OS{}.DiskUsage(cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	perQueue := map[int32]int64{}
	for _, a := range acked {
		perQueue[a.qid]++
	}
	for qid, n := range perQueue {
		waitVisible(t, s, "T", qid, n)
	}
	if err := s.persistProgress(); err != nil {
		t.Fatalf("persist on the full disk: %v", err)
	}
	checkDense(t, s, acked, "on the full ext4 disk")
	checkAcked(t, s, acked, "on the full ext4 disk")
	if st := s.Stats(); st.ReadOnly != nil || st.MinOffset != 0 || st.WriteStalled || !st.DiskFull {
		t.Fatalf("stats on the full disk: %+v", st)
	}
	if strings.Contains(logs.String(), "no space left") {
		t.Fatalf("a write met ENOSPC:\n%s", logs.String())
	}
	_, freeAfter, _ := vfs.OS{}.DiskUsage(cfg.Dir)
	t.Logf("ext4 of %d bytes: acked %d messages (%d record bytes), refused %d batches with %d bytes free (reserve %d), %d free after dispatch and persist",
		total, len(acked), written, refused, freeAtRefusal, s.reserveBytes(int64(total)), freeAfter)
}
