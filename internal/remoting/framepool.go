package remoting

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Request frame buffers are reused only where that is proven safe. A
// request's Body aliases the buffer its frame was read into, so reusing the
// buffer while anything still refers to a slice of it would silently change
// bytes someone else is about to store or send. Reuse is therefore opt-in
// per request code: a Handler that implements BodyBorrower promises, for
// the codes it names, that nothing of the request's body survives Handle's
// return. For those requests only, the connection returns the buffer to
// framePool after the handler returned and its response was queued; every
// other frame (other codes, responses, handlers that do not borrow) keeps
// its buffer as before, and the garbage collector frees it.

// BodyBorrower is implemented by a Handler that only borrows the body of
// some requests: for a request whose code BorrowsBody reports true, Handle
// (and everything it calls, including what it starts) uses req.Body and
// any slice of it only until Handle returns, and the response it returns
// does not alias it either. The connection may then overwrite the buffer
// with a later request's bytes. Header fields (ExtFields, Remark, Language)
// are copies and are not affected. A handler that decides, for one
// request, to keep the body after all calls req.KeepBody before returning.
type BodyBorrower interface {
	Handler
	BorrowsBody(code int16) bool
}

// BorrowsBody reports whether h is a BodyBorrower that borrows the body of
// requests with this code (for handlers that delegate to another).
func BorrowsBody(h Handler, code int16) bool {
	b, ok := h.(BodyBorrower)
	return ok && b.BorrowsBody(code)
}

// KeepBody withdraws req from buffer reuse: its Body stays valid after the
// handler returns, even though the handler's BorrowsBody said it would not
// be needed (e.g. a handler recovering from a panic, which cannot know
// what was left holding it). It has no effect on other requests.
func (c *Command) KeepBody() { c.keepBody = true }

// Size classes: 256 B, then four classes per doubling (each a quarter of
// its power of two apart, so at most 25 % of a buffer is slack) up to
// maxPooledFrame. Larger frames are allocated as before and never pooled.
//
// How much the pool keeps: a pipelining producer's requests arrive and
// finish in waves (a combined append ends hundreds of handlers at once), so
// the frames a connection holds swing between about none and its whole
// pipeline (an ASYNC_FLUSH batch benchmark: ~1000 frames of 40 KiB). A
// pool that cannot hold one swing misses on most reads of the next one
// (4 MiB: about half). So the pool keeps up to maxIdleFrameBytes, but
// only while the load uses it: every trimInterval it drops the bytes that
// stayed idle through the whole interval (its low-water mark), down to
// keepIdleFrameBytes. After a load stops, at most keepIdleFrameBytes stay
// idle within two intervals.
const (
	minFrameClassShift = 8
	maxPooledFrame     = 1 << 20
	numFrameClasses    = 1 + 4*(20-minFrameClassShift)
	// maxIdleFrameBytes bounds the bytes the pool holds across all
	// classes; a released buffer that does not fit is left to the GC.
	maxIdleFrameBytes = 64 << 20
	// keepIdleFrameBytes is what a trim leaves idle.
	keepIdleFrameBytes = 4 << 20
	trimInterval       = time.Second
	// maxIdlePerClass bounds the buffers of one class (small classes
	// could otherwise hold many thousands of entries within the bytes).
	maxIdlePerClass = 4096
)

// frameClass returns the class of an n-byte frame and its buffer size, or
// ok = false if n is above maxPooledFrame.
func frameClass(n int) (idx, size int, ok bool) {
	if n > maxPooledFrame {
		return 0, 0, false
	}
	if n <= 1<<minFrameClassShift {
		return 0, 1 << minFrameClassShift, true
	}
	k := bits.Len(uint(n - 1)) // 2^(k-1) < n <= 2^k
	step := 1 << (k - 3)
	m := (n + step - 1) >> (k - 3) // 5..8 steps of 2^(k-3)
	return 1 + 4*(k-minFrameClassShift-1) + (m - 5), m * step, true
}

type framePool struct {
	idle    atomic.Int64 // bytes held in the free lists
	low     atomic.Int64 // lowest idle since the last trim
	armed   atomic.Bool  // a trim is scheduled
	classes [numFrameClasses]struct {
		mu   sync.Mutex
		free [][]byte
	}
	reused, released atomic.Uint64
	// schedule, when set, replaces the trimInterval timer that runs the
	// next trim: a test runs trims itself, at the points it checks, so
	// that a slow run (the race detector, a loaded machine) cannot have
	// a timer trim in the middle of its steps.
	schedule func(trim func())
}

var frames framePool

// get returns a pooled buffer of n's class (len 0, cap the class size), or
// nil when the class has none.
func (p *framePool) get(n int) []byte {
	idx, size, ok := frameClass(n)
	if !ok {
		return nil
	}
	cl := &p.classes[idx]
	cl.mu.Lock()
	last := len(cl.free) - 1
	if last < 0 {
		cl.mu.Unlock()
		return nil
	}
	buf := cl.free[last]
	cl.free[last] = nil
	cl.free = cl.free[:last]
	cl.mu.Unlock()
	idle := p.idle.Add(-int64(size))
	for low := p.low.Load(); idle < low && !p.low.CompareAndSwap(low, idle); low = p.low.Load() {
	}
	p.reused.Add(1)
	return buf[:0]
}

// put takes back a buffer no one refers to any more. Its capacity must be
// a class size (readFrame allocates poolable buffers so); anything else,
// or a buffer beyond the idle bounds, is left to the GC.
func (p *framePool) put(buf []byte) {
	buf = buf[:cap(buf)]
	idx, size, ok := frameClass(len(buf))
	if !ok || size != len(buf) {
		return
	}
	p.released.Add(1)
	if poisonFrames.Load() {
		poison(buf)
	}
	idle := p.idle.Add(int64(size))
	if idle > maxIdleFrameBytes {
		p.idle.Add(-int64(size))
		return
	}
	cl := &p.classes[idx]
	cl.mu.Lock()
	if len(cl.free) < maxIdlePerClass {
		cl.free = append(cl.free, buf)
		buf = nil
	}
	cl.mu.Unlock()
	if buf != nil {
		p.idle.Add(-int64(size))
		return
	}
	if idle > keepIdleFrameBytes && p.armed.CompareAndSwap(false, true) {
		p.scheduleTrim() // low has been tracked since the last trim
	}
}

// trim drops the bytes that stayed idle since the last trim (or since it
// was scheduled), keeping keepIdleFrameBytes, largest buffers first; it
// runs again while more than that is idle.
func (p *framePool) trim() {
	excess := min(p.low.Load(), p.idle.Load()) - keepIdleFrameBytes
	for i := numFrameClasses - 1; i >= 0 && excess > 0; i-- {
		cl := &p.classes[i]
		cl.mu.Lock()
		for len(cl.free) > 0 && excess > 0 {
			last := len(cl.free) - 1
			n := int64(cap(cl.free[last]))
			cl.free[last] = nil
			cl.free = cl.free[:last]
			p.idle.Add(-n)
			excess -= n
		}
		cl.mu.Unlock()
	}
	idle := p.idle.Load()
	p.low.Store(idle)
	if idle > keepIdleFrameBytes {
		p.scheduleTrim()
		return
	}
	p.armed.Store(false)
	// A put that saw armed set just before this cleared it did not
	// schedule a trim; check again so its bytes are not kept for good.
	if p.idle.Load() > keepIdleFrameBytes && p.armed.CompareAndSwap(false, true) {
		p.scheduleTrim()
	}
}

// scheduleTrim has trim run once, trimInterval from now (or hands it to
// p.schedule).
func (p *framePool) scheduleTrim() {
	if p.schedule != nil {
		p.schedule(p.trim)
		return
	}
	time.AfterFunc(trimInterval, p.trim)
}

// FramePoolStats counts the reuse of request frame buffers (process-wide).
type FramePoolStats struct {
	Released  uint64 // buffers given back after a borrowing handler returned
	Reused    uint64 // frames read into a buffer taken from the pool
	IdleBytes int64  // bytes currently held by the pool
}

// FramePool returns the frame buffer pool's counters.
func FramePool() FramePoolStats {
	return FramePoolStats{Released: frames.released.Load(), Reused: frames.reused.Load(), IdleBytes: frames.idle.Load()}
}

// poisonFrames makes every released buffer be overwritten with
// PoisonByte before it can be reused, so that a use after release shows
// as corrupt data instead of plausible stale bytes. Tests turn it on
// (PoisonReleasedFrames, or the keelpoison build tag).
var poisonFrames atomic.Bool

// PoisonByte fills released frame buffers while poisoning is on.
const PoisonByte = 0xDB

// PoisonReleasedFrames turns the poisoning of released frame buffers on or
// off (process-wide). It is meant for tests: a stored message, a response
// or a retained slice that shows PoisonByte runs where the sender's bytes
// were proves a use after release.
func PoisonReleasedFrames(on bool) { poisonFrames.Store(on) }

func poison(buf []byte) {
	for i := range buf {
		buf[i] = PoisonByte
	}
}

// overlaps reports whether b shares memory with buf[:cap(buf)].
func overlaps(b, buf []byte) bool {
	if cap(b) == 0 || cap(buf) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	hi := lo + uintptr(cap(buf))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p < hi && p+uintptr(cap(b)) > lo
}

// aliases reports whether cmd's body (Body or any BodyParts part) shares
// memory with buf: a response that does would be written after buf was
// reused.
func (c *Command) aliases(buf []byte) bool {
	if c == nil {
		return false
	}
	if overlaps(c.Body, buf) {
		return true
	}
	for _, p := range c.BodyParts {
		if overlaps(p, buf) {
			return true
		}
	}
	return false
}
