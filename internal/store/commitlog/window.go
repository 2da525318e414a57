package commitlog

import "sync"

// Read window: the log's most recent bytes, kept in memory as they are
// written (Config.ReadWindowBytes), so that a consumer keeping up with the
// writer is served a copy from memory instead of one pread per record. The
// records of a topic's queues interleave in the log, so the records of one
// pull are rarely contiguous and reading ahead does not save those preads.
//
// The window is a ring of ReadWindowBytes bytes (rounded down to whole
// chunks of windowChunkBytes when larger) holding the log's bytes [lo, hi),
// hi-lo at most its size, log offset x at ring position x % size. Its
// chunks are allocated as the writer first reaches them, so the window
// takes no more memory than the log has written since the start. The
// writer (write) copies each write into it once the write succeeded and
// before it publishes the new written offset: one copy per append, never a
// syscall under the window's lock. A read (readUpTo) whose first need
// bytes lie in [lo, min(hi, written)) is served from it, up to
// min(hi, written) and len(p); any other read goes to the file as before.
// A read is checked against the written offset and the segments exactly as
// a read of the file, and every record served is verified by its caller as
// before: the window changes where the bytes come from, never what is
// checked.
//
// When the writer closes a segment, the rest of it after the blank marker
// (in no file: a read there holds no record) becomes the window's gap: the
// window goes on at the next segment's start and serves no read that
// touches the gap. One gap at most: closing the next segment drops what
// lies before the older gap's end. So the window holds the last segment's
// bytes and, right after a roll-over, the end of the one before.
//
// The bytes held are the bytes written at those offsets, so whatever
// changes the file below hi changes the window first: Truncate cuts it at
// the cut (before the file), StartAt and Recover empty it, a repair (hole
// record) empties it, any other write that does not continue it starts it
// again at its offset, and a failed log empties and stops it (after a
// failed fsync nothing is trusted but what a read of the file says).
// Re-reads after a failed verification (RereadEntry, RereadRecord,
// Reader.Reread) bypass it: they exist to read the disk. It is never
// persisted; after a restart it starts empty and fills from the first
// append.
//
// Concurrency: mu guards lo, hi, the gap, off and the chunk slots; a
// reader copies under the read lock. The writer moves lo past the ring
// positions it is about to overwrite under the write lock (which waits for readers of them), copies
// without the lock (no reader can enter that part of the ring any more,
// since it now lies below lo), then publishes hi under the write lock.
type readWindow struct {
	size  int64 // bytes of the ring; 0: no window
	chunk int64 // bytes of each of its chunks (size is a multiple)

	mu           sync.RWMutex
	chunks       [][]byte // the ring; a chunk is allocated when the writer first reaches it
	lo, hi       int64    // log bytes held: [lo, hi)
	gapLo, gapHi int64    // but for these, the blank tail of a closed segment (none if equal)
	off          bool     // the log failed: hold nothing, take nothing
}

// windowChunkBytes is the size of the read window's chunks.
const windowChunkBytes = 1 << 20

// newReadWindow returns a window of about size bytes (none if size <= 0).
func newReadWindow(size int64) readWindow {
	if size <= 0 {
		return readWindow{}
	}
	chunk := min(size, windowChunkBytes)
	size -= size % chunk
	return readWindow{size: size, chunk: chunk, chunks: make([][]byte, size/chunk)}
}

// put records that b was written at log offset off. Only the writer calls
// it.
func (w *readWindow) put(off int64, b []byte) {
	if w.size <= 0 || len(b) == 0 {
		return
	}
	end := off + int64(len(b))
	if int64(len(b)) > w.size { // only the last size bytes can be held
		b = b[int64(len(b))-w.size:]
		off = end - w.size
	}
	// The chunks [off, end) reaches first, allocated without the lock (each
	// chunk once: the range may wrap around onto its first chunk).
	first, touched := off-off%w.chunk, min((end-off+off%w.chunk+w.chunk-1)/w.chunk, int64(len(w.chunks)))
	var fresh [][]byte
	for k := range touched {
		if w.chunks[(first/w.chunk+k)%int64(len(w.chunks))] == nil {
			fresh = append(fresh, make([]byte, w.chunk))
		}
	}
	w.mu.Lock()
	if w.off {
		w.mu.Unlock()
		return
	}
	for k := range touched {
		if i := (first/w.chunk + k) % int64(len(w.chunks)); w.chunks[i] == nil {
			w.chunks[i], fresh = fresh[0], fresh[1:]
		}
	}
	if off != w.hi {
		w.lo, w.hi = off, off // not a continuation: start again here
		w.gapLo, w.gapHi = off, off
	}
	w.lo = max(w.lo, end-w.size)
	w.mu.Unlock()

	for x := off; len(b) > 0; {
		at := x % w.size
		n := copy(w.chunks[at/w.chunk][at%w.chunk:], b)
		b, x = b[n:], x+int64(n)
	}

	w.mu.Lock()
	if !w.off {
		w.hi = end
	}
	w.mu.Unlock()
}

// read copies the bytes at off into p from the window if at least need of
// them, below limit (the written offset the caller checked), are held:
// min(len(p), held bytes below limit) of them. It reports how many, or
// false if the window cannot serve the read.
func (w *readWindow) read(p []byte, off int64, need int, limit int64) (int, bool) {
	if w.size <= 0 || need <= 0 {
		return 0, false
	}
	w.mu.RLock()
	hi := min(w.hi, limit)
	gap := w.gapHi > w.gapLo // an empty gap (a cut below it, a reset) is none
	if gap && off < w.gapLo {
		hi = min(hi, w.gapLo) // the file of a closed segment ends there
	}
	if off < w.lo || off+int64(need) > hi || gap && off < w.gapHi && off+int64(need) > w.gapLo {
		w.mu.RUnlock()
		return 0, false
	}
	n := min(int64(len(p)), hi-off)
	for x, q := off, p[:n]; len(q) > 0; {
		at := x % w.size
		k := copy(q, w.chunks[at/w.chunk][at%w.chunk:])
		q, x = q[k:], x+int64(k)
	}
	w.mu.RUnlock()
	return int(n), true
}

// skip records that the writer closed the segment ending at segEnd, the
// window's end being its blank marker's: the window goes on at segEnd,
// the bytes up to it its gap.
func (w *readWindow) skip(segEnd int64) {
	if w.size <= 0 {
		return
	}
	w.mu.Lock()
	if w.hi < segEnd && !w.off {
		if w.gapHi > w.gapLo {
			w.lo = max(w.lo, w.gapHi) // one gap at most
		}
		w.gapLo, w.gapHi = w.hi, segEnd
		w.hi = segEnd
		w.lo = max(w.lo, w.hi-w.size)
	}
	w.mu.Unlock()
}

// cut drops the bytes from off on.
func (w *readWindow) cut(off int64) {
	if w.size <= 0 {
		return
	}
	w.mu.Lock()
	w.hi = min(w.hi, off)
	w.lo = min(w.lo, w.hi)
	w.gapHi = min(w.gapHi, w.hi)
	w.gapLo = min(w.gapLo, w.gapHi)
	w.mu.Unlock()
}

// reset empties the window; the next write at off continues it.
func (w *readWindow) reset(off int64) {
	if w.size <= 0 {
		return
	}
	w.mu.Lock()
	w.lo, w.hi = off, off
	w.gapLo, w.gapHi = off, off
	w.mu.Unlock()
}

// clear empties the window where it ends.
func (w *readWindow) clear() {
	if w.size <= 0 {
		return
	}
	w.mu.Lock()
	w.lo = w.hi
	w.gapLo, w.gapHi = w.hi, w.hi
	w.mu.Unlock()
}

// stop empties the window for good (the log failed).
func (w *readWindow) stop() {
	if w.size <= 0 {
		return
	}
	w.mu.Lock()
	w.off = true
	w.lo = w.hi
	w.mu.Unlock()
}

// held returns the log range the window holds (tests).
func (w *readWindow) held() (lo, hi int64) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.lo, w.hi
}

// allocated returns the bytes of the chunks allocated (tests).
func (w *readWindow) allocated() int64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	n := int64(0)
	for _, c := range w.chunks {
		n += int64(len(c))
	}
	return n
}
