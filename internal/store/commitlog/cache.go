package commitlog

import (
	"errors"

	"github.com/keelmq/keel/internal/vfs"
)

// Page-cache window: every appended byte lands in a page-cache page, and
// left alone the kernel keeps all of them until memory runs out, taking a
// free page for every new one while it has any.
// When enabled (Config.CacheWindowBytes), a trimmer goroutine releases the
// pages of the log more than CacheWindowBytes behind the flushed offset
// (vfs.CacheDropper: posix_fadvise POSIX_FADV_DONTNEED), so that
//
//   - the log's share of the page cache stays bounded (in a container the
//     page cache is charged to its memory limit); and
//   - new writes reuse the memory of released pages. On a virtual machine
//     whose host backs guest memory only when first touched and takes free
//     memory back (balloon free page reporting), a write to a page never
//     used before costs a fault in the host: BenchmarkBufferedWrite in
//     internal/diskprobe measures both cases (docs/performance.md).
//
// Only flushed bytes are released: their pages are clean, so dropping them
// writes nothing. A consumer reading more than the window behind the writer
// reads from the disk; the released range is never released again when a
// read brings it back (the kernel reclaims those pages as usual).
// Releasing never changes the file's contents, so crashes and failures are
// unaffected: a failed release is logged once and releasing stops.

// cacheDropChunk is how much one release call covers: small enough that
// the segment lock is held briefly (a release took about 0.6 ms in a CPU
// profile of async-batch on the machine of docs/benchmarks.md), large
// enough to be cheap per byte.
const cacheDropChunk = 8 << 20

// afterFlushCache wakes the trimmer when the flushed offset moved a chunk
// past the window.
func (l *Log) afterFlushCache(flushed int64) {
	if l.cfg.CacheWindowBytes <= 0 || l.cacheOff.Load() || flushed-l.cfg.CacheWindowBytes-l.cacheDropped.Load() < cacheDropChunk {
		return
	}
	select {
	case l.cacheKick <- struct{}{}:
	default:
	}
}

// RunCacheTrimmer releases the page cache of the log behind the window
// until stop is closed (only one may run; a no-op unless
// Config.CacheWindowBytes > 0). Start it after Recover: it releases nothing
// written before it started.
func (l *Log) RunCacheTrimmer(stop <-chan struct{}) {
	if l.cfg.CacheWindowBytes <= 0 {
		return
	}
	l.cacheDropped.Store(max(l.MinOffset(), l.flushed.Load()-l.cfg.CacheWindowBytes))
	for {
		select {
		case <-stop:
			return
		case <-l.cacheKick:
		}
		for l.dropCacheOnce() {
			select {
			case <-stop:
				return
			default:
			}
		}
	}
}

// dropCacheOnce releases the next chunk behind the window and reports
// whether there may be more to do.
func (l *Log) dropCacheOnce() bool {
	from := l.cacheDropped.Load()
	limit := l.flushed.Load() - l.cfg.CacheWindowBytes
	if limit-from < cacheDropChunk {
		return false
	}
	segStart := l.SegmentStart(from)
	to := min(from+cacheDropChunk, segStart+l.cfg.SegmentBytes)
	l.segMu.RLock()
	s := l.segmentLocked(from)
	var err error
	if s != nil {
		if d, ok := s.f.(vfs.CacheDropper); ok {
			err = d.DropCache(from-s.base, to-from)
		} else {
			err = errNoCacheDrop
		}
	}
	l.segMu.RUnlock()
	if err != nil {
		l.cacheOff.Store(true)
		l.logger.Warn("commitlog: cannot release the page cache behind the window; leaving it to the kernel",
			"segment", s.path, "err", err)
		return false
	}
	// A segment removed by retention (s == nil) has nothing left to release.
	l.cacheDropped.Store(to)
	return true
}

var errNoCacheDrop = errors.New("commitlog: the filesystem cannot release cached pages")
