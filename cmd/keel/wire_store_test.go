package main

import (
	"log/slog"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/store"
)

func TestStoreConfigCarriesBrokerConf(t *testing.T) {
	b, _, err := config.Parse([]byte(`flushDiskType=ASYNC_FLUSH
flushIntervalCommitLog=250
mapedFileSizeCommitLog=134217728
fileReservedTime=12
maxMessageSize=1048576
commitLogPageCacheBytes=268435456
commitLogReadWindowBytes=2097152
diskPressureDelete=consumed
scrubBytesPerSecond=1048576
`), "broker.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	c := storeConfig(b, &parts{cfg: b, log: slog.New(slog.DiscardHandler)})
	if c.FlushDiskType != store.AsyncFlush || c.FlushInterval != 250*time.Millisecond ||
		c.CommitLogSegmentBytes != 128<<20 || c.FileReservedTime != 12*time.Hour || c.MaxMessageBytes != 1<<20 {
		t.Fatalf("store config %+v does not follow broker.conf", c)
	}
	if c.CommitLogCacheBytes != 256<<20 {
		t.Fatalf("CommitLogCacheBytes %d, want commitLogPageCacheBytes 268435456", c.CommitLogCacheBytes)
	}
	if c.ReadWindowBytes != 2<<20 {
		t.Fatalf("ReadWindowBytes %d, want commitLogReadWindowBytes 2097152", c.ReadWindowBytes)
	}
	if c.DiskPressureDelete != store.PressureDeleteConsumed {
		t.Fatalf("DiskPressureDelete %v, want consumed", c.DiskPressureDelete)
	}
	if c.ScrubBytesPerSecond != 1<<20 {
		t.Fatalf("ScrubBytesPerSecond %d, want scrubBytesPerSecond 1048576", c.ScrubBytesPerSecond)
	}
	d := storeConfig(config.Default(), &parts{cfg: config.Default(), log: slog.New(slog.DiscardHandler)})
	if d.CommitLogCacheBytes != 0 {
		t.Fatalf("default CommitLogCacheBytes %d, want 0 (the kernel manages the page cache)", d.CommitLogCacheBytes)
	}
	if d.ReadWindowBytes != config.DefaultCommitLogReadWindowBytes {
		t.Fatalf("default ReadWindowBytes %d, want %d", d.ReadWindowBytes, config.DefaultCommitLogReadWindowBytes)
	}
	off := config.Default()
	off.CommitLogReadWindowBytes = 0
	if c := storeConfig(off, &parts{cfg: off, log: slog.New(slog.DiscardHandler)}); c.ReadWindowBytes >= 0 {
		t.Fatalf("commitLogReadWindowBytes=0 gave the store ReadWindowBytes %d, want none (< 0)", c.ReadWindowBytes)
	}
	if d.DiskPressureDelete != store.PressureDeleteExpired {
		t.Fatalf("default DiskPressureDelete %v, want expired", d.DiskPressureDelete)
	}
	if d.ScrubBytesPerSecond != config.DefaultScrubBytesPerSecond {
		t.Fatalf("default ScrubBytesPerSecond %d, want %d", d.ScrubBytesPerSecond, config.DefaultScrubBytesPerSecond)
	}
}
