package remoting

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"runtime"
	"sync"
	"testing"
)

// Every test of this package runs with released frame buffers poisoned, so
// a use after release reads PoisonByte instead of plausible bytes.
func init() { PoisonReleasedFrames(true) }

func TestFrameClass(t *testing.T) {
	prevIdx, prevSize := -1, 0
	for n := 1; n <= maxPooledFrame; n++ {
		idx, size, ok := frameClass(n)
		if !ok || size < n || idx < 0 || idx >= numFrameClasses {
			t.Fatalf("frameClass(%d) = %d, %d, %v", n, idx, size, ok)
		}
		if n > 1<<minFrameClassShift && 4*(size-n) > n {
			t.Fatalf("frameClass(%d): size %d wastes more than a quarter", n, size)
		}
		if idx == prevIdx && size != prevSize {
			t.Fatalf("class %d has sizes %d and %d", idx, prevSize, size)
		}
		if idx != prevIdx && (idx != prevIdx+1 || prevIdx >= 0 && n != prevSize+1) {
			t.Fatalf("n=%d: class %d (size %d) follows class %d (size %d)", n, idx, size, prevIdx, prevSize)
		}
		if i2, s2, _ := frameClass(size); i2 != idx || s2 != size {
			t.Fatalf("a class size %d maps to class %d size %d, not itself", size, i2, s2)
		}
		prevIdx, prevSize = idx, size
	}
	if prevIdx != numFrameClasses-1 || prevSize != maxPooledFrame {
		t.Fatalf("last class %d size %d", prevIdx, prevSize)
	}
	if _, _, ok := frameClass(maxPooledFrame + 1); ok {
		t.Fatal("a frame above maxPooledFrame has a class")
	}
}

// drainPool empties the pool so that a test starts from a known state.
func drainPool() {
	for i := range frames.classes {
		cl := &frames.classes[i]
		cl.mu.Lock()
		for _, b := range cl.free {
			frames.idle.Add(-int64(cap(b)))
		}
		clear(cl.free)
		cl.free = cl.free[:0]
		cl.mu.Unlock()
	}
}

// manualTrims makes p's trims run only when the test calls trim: filling
// a pool arms a trim, and a trimInterval timer would fire in the middle of
// a run slower than that (the race detector, a loaded machine). It returns
// how many trims p has scheduled so far.
func manualTrims(p *framePool) func() int {
	var n int
	p.schedule = func(func()) { n++ }
	return func() int { return n }
}

func TestFramePoolBounds(t *testing.T) {
	// A new pool for each part: a trim a part armed reads its own pool.
	p := new(framePool)
	manualTrims(p)
	for i := 0; i < maxIdleFrameBytes/maxPooledFrame+4; i++ {
		p.put(make([]byte, maxPooledFrame))
	}
	if idle := p.idle.Load(); idle != maxIdleFrameBytes {
		t.Fatalf("idle %d bytes after filling, bound %d", idle, maxIdleFrameBytes)
	}
	p = new(framePool)
	manualTrims(p)
	for i := 0; i < 2*maxIdlePerClass; i++ {
		p.put(make([]byte, 1<<minFrameClassShift))
	}
	if n := len(p.classes[0].free); n != maxIdlePerClass {
		t.Fatalf("class 0 holds %d buffers, bound %d", n, maxIdlePerClass)
	}
	p = new(framePool)
	manualTrims(p)
	_, size, _ := frameClass(40 << 10)
	p.put(make([]byte, size+1))           // not a class size
	p.put(make([]byte, 2*maxPooledFrame)) // above maxPooledFrame
	p.put(make([]byte, 0))                // nothing
	p.put(make([]byte, size-1, size))     // length does not matter, capacity does
	if idle := p.idle.Load(); idle != int64(size) {
		t.Fatalf("idle %d, want one buffer of %d", idle, size)
	}
	// A pooled buffer comes back poisoned, with length 0 and its class's
	// capacity.
	b := p.get(size - 100)
	if b == nil || len(b) != 0 || cap(b) != size {
		t.Fatalf("get: len %d cap %d", len(b), cap(b))
	}
	if b = b[:size]; bytes.Count(b, []byte{PoisonByte}) != size {
		t.Fatal("a released buffer was not poisoned")
	}
	if p.get(size) != nil || p.idle.Load() != 0 {
		t.Fatal("the class should be empty")
	}
}

// TestFramePoolTrim: a trim drops only what stayed idle since the last one,
// and never below keepIdleFrameBytes.
func TestFramePoolTrim(t *testing.T) {
	var p framePool
	scheduled := manualTrims(&p)
	const mib = 1 << 20
	for range 16 {
		p.put(make([]byte, mib))
	}
	// Armed when idle passed keepIdleFrameBytes; the low-water mark since
	// the pool was made is 0: all of it was in use then.
	if !p.armed.Load() || p.low.Load() != 0 || scheduled() != 1 {
		t.Fatalf("armed %v low %d, %d trims scheduled", p.armed.Load(), p.low.Load(), scheduled())
	}
	p.trim()
	if idle := p.idle.Load(); idle != 16*mib || scheduled() != 2 {
		t.Fatalf("first trim left %d, want 16 MiB and the next trim scheduled (%d scheduled)", idle, scheduled())
	}
	p.trim() // nothing was taken since: all but keepIdleFrameBytes goes
	if idle := p.idle.Load(); idle != keepIdleFrameBytes || p.armed.Load() || scheduled() != 2 {
		t.Fatalf("second trim left %d (armed %v, %d scheduled), want %d and no trim scheduled", idle, p.armed.Load(), scheduled(), keepIdleFrameBytes)
	}
	for range 2 {
		p.get(mib)
	}
	for range 8 {
		p.put(make([]byte, mib))
	}
	if !p.armed.Load() || scheduled() != 3 {
		t.Fatalf("puts above the floor left armed %v, %d trims scheduled", p.armed.Load(), scheduled())
	}
	p.trim() // the low-water mark was 2 MiB: nothing stayed idle above the floor
	if idle := p.idle.Load(); idle != 10*mib || scheduled() != 4 {
		t.Fatalf("trim after use left %d (%d scheduled), want 10 MiB and the next trim scheduled", idle, scheduled())
	}
	p.trim()
	if idle := p.idle.Load(); idle != keepIdleFrameBytes || p.armed.Load() || scheduled() != 4 {
		t.Fatalf("idle %d armed %v (%d scheduled), want %d and no trim scheduled", idle, p.armed.Load(), scheduled(), keepIdleFrameBytes)
	}
}

// readFrame into a pooled buffer, larger than the frame, must read the
// frame only and leave the next one in the reader.
func TestReadFramePooledStopsAtFrameEnd(t *testing.T) {
	drainPool()
	t.Cleanup(drainPool)
	frame := func(fill byte, n int) []byte {
		b := make([]byte, 4+n)
		binary.BigEndian.PutUint32(b, uint32(n))
		for i := 4; i < len(b); i++ {
			b[i] = fill
		}
		return b
	}
	for _, n := range []int{5, 1000, 40 << 10, 200 << 10, maxPooledFrame, maxPooledFrame + 7} {
		_, size, _ := frameClass(n)
		if size > 0 {
			frames.put(make([]byte, size)) // a pooled buffer for the first read
		}
		stream := append(frame('a', n), frame('b', n)...)
		// Deliver in small pieces so the buffer fills over several reads.
		cut := min(4097, len(stream))
		r := io.MultiReader(bytes.NewReader(stream[:3]), bytes.NewReader(stream[3:cut]), bytes.NewReader(stream[cut:]))
		for _, want := range []byte{'a', 'b'} {
			p, err := readFrame(r, DefaultMaxFrameBytes, true, false)
			if err != nil {
				t.Fatalf("n=%d: %v", n, err)
			}
			if len(p) != n || bytes.Count(p, []byte{want}) != n {
				t.Fatalf("n=%d: read %d bytes, want %d of %q", n, len(p), n, want)
			}
			if size > 0 && cap(p) != size {
				t.Fatalf("n=%d: cap %d, want the class size %d", n, cap(p), size)
			}
		}
	}
	// A frame cut short gives its buffer back.
	short := frame('c', 100<<10)[:50<<10]
	if _, err := readFrame(bytes.NewReader(short), DefaultMaxFrameBytes, true, false); err != io.ErrUnexpectedEOF {
		t.Fatalf("short frame: %v", err)
	}
}

// stash is a handler that keeps a slice of every request's body (which a
// borrowing handler must not do) so the test can look at it afterwards.
type stash struct {
	borrowed map[int16]bool
	mu       sync.Mutex
	kept     map[string][]byte // by the request's "id" ext field
	do       func(req *Command) *Command
}

func (s *stash) BorrowsBody(code int16) bool { return s.borrowed[code] }

func (s *stash) Handle(_ context.Context, _ *Conn, req *Command) *Command {
	s.mu.Lock()
	s.kept[req.Ext("id")] = req.Body
	s.mu.Unlock()
	if s.do != nil {
		if resp := s.do(req); resp != nil {
			return resp
		}
	}
	return req.NewResponse(ResSuccess, "")
}

// TestBorrowedBodyIsReleasedAndPoisoned shows what poisoning catches: the
// body slice a borrowing handler (wrongly) kept is overwritten once the
// handler returned, while bodies the connection does not reuse stay
// intact: codes the handler does not borrow, KeepBody, a panic, and a
// response that aliases the request.
func TestBorrowedBodyIsReleasedAndPoisoned(t *testing.T) {
	drainPool()
	t.Cleanup(drainPool)
	const borrowedCode, otherCode = 10, 11
	s := &stash{borrowed: map[int16]bool{borrowedCode: true}, kept: map[string][]byte{}}
	s.do = func(req *Command) *Command {
		switch req.Ext("id") {
		case "keep":
			req.KeepBody()
		case "panic":
			panic("handler bug")
		case "echo":
			resp := req.NewResponse(ResSuccess, "")
			resp.Body = req.Body[1:]
			return resp
		}
		return nil
	}
	srv, addr := startServer(t, ServerConfig{}, s)
	cl := dialClient(t, addr, ClientConfig{})
	body := func(id string) []byte { return bytes.Repeat([]byte(id), 2000) }
	before := FramePool()
	for _, id := range []string{"borrowed", "other", "keep", "panic", "echo"} {
		code := int16(borrowedCode)
		if id == "other" {
			code = otherCode
		}
		req := NewRequest(code, map[string]string{"id": id}, body(id))
		resp := invoke(t, cl, req)
		if id == "echo" && !bytes.Equal(resp.Body, body(id)[1:]) {
			t.Fatalf("echo response body changed: %.40q", resp.Body)
		}
	}
	// Shutdown waits for every handler, and so for every release.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := FramePool().Released - before.Released; got != 1 {
		t.Fatalf("%d buffers released, want 1 (the plain borrowed request)", got)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, kept := range s.kept {
		poisoned := bytes.Count(kept, []byte{PoisonByte}) == len(kept)
		intact := bytes.Equal(kept, body(id))
		switch {
		case id == "borrowed" && !poisoned:
			t.Errorf("%s: the kept body was not poisoned after release: %.40q", id, kept)
		case id != "borrowed" && !intact:
			t.Errorf("%s: the kept body changed although its buffer is not reused: %.40q", id, kept)
		}
	}
}

// TestBorrowedFramesReused runs many borrowed requests of mixed sizes over
// one connection, concurrently, and checks that every handler saw its own
// bytes (a buffer reused while a handler runs would show another's).
func TestBorrowedFramesReused(t *testing.T) {
	drainPool()
	t.Cleanup(drainPool)
	h := &checker{}
	_, addr := startServer(t, ServerConfig{}, h)
	cl := dialClient(t, addr, ClientConfig{})
	before := FramePool()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				n := 100 + (g*7919+i*104729)%(70<<10)
				fill := byte('a' + (g+i)%26)
				req := NewRequest(10, map[string]string{"fill": string(fill)}, bytes.Repeat([]byte{fill}, n))
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				resp, err := cl.Invoke(ctx, req)
				cancel()
				if err == nil && resp.Code != ResSuccess {
					err = io.ErrUnexpectedEOF
					if resp.Remark != "" {
						err = &remarkError{resp.Remark}
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := FramePool()
	if st.Released-before.Released == 0 || st.Reused-before.Reused == 0 {
		t.Fatalf("no reuse: %+v -> %+v", before, st)
	}
}

type remarkError struct{ s string }

func (e *remarkError) Error() string { return e.s }

// checker borrows every body and checks it is all the "fill" byte, twice:
// on entry and after yielding, while other requests are being read.
type checker struct{}

func (checker) BorrowsBody(int16) bool { return true }

func (checker) Handle(_ context.Context, _ *Conn, req *Command) *Command {
	fill := req.Ext("fill")
	for pass := 0; pass < 2; pass++ {
		if len(fill) != 1 || bytes.Count(req.Body, []byte(fill)) != len(req.Body) {
			return req.NewResponse(ResSystemError, "body is not all "+fill)
		}
		runtime.Gosched() // let the reader run
	}
	return req.NewResponse(ResSuccess, "")
}

// TestTrustedFrameLengthAllocatesOnce: a frame on a dialed connection is
// read into one buffer of its announced length; elsewhere the buffer grows
// as bytes arrive (a claimed length alone allocates only one read chunk),
// here 64 KiB, 128 KiB, 256 KiB and 300 KiB: three buffers more.
func TestTrustedFrameLengthAllocatesOnce(t *testing.T) {
	frame := make([]byte, 4+300<<10) // readFrame does not decode the payload
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	r := bytes.NewReader(frame)
	allocs := func(trust bool) float64 {
		return testing.AllocsPerRun(20, func() {
			r.Reset(frame)
			p, err := readFrame(r, DefaultMaxFrameBytes, false, trust)
			if err != nil || len(p) != len(frame)-4 {
				t.Fatalf("read: %v, %d bytes", err, len(p))
			}
		})
	}
	trusted, grown := allocs(true), allocs(false)
	if grown-trusted != 3 {
		t.Fatalf("%v allocations trusting the length, %v growing the buffer: want 3 fewer", trusted, grown)
	}
}
