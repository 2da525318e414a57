package remoting

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keelmq/keel/internal/doorstats"
)

var (
	// ErrClosed: the connection is closed.
	ErrClosed = errors.New("remoting: connection closed")
	// ErrServerClosed: Serve was called after, or returned because of, Shutdown.
	ErrServerClosed = errors.New("remoting: server closed")
	// ErrIdleTimeout: no frame arrived within the idle timeout.
	ErrIdleTimeout = errors.New("remoting: idle timeout")
	// errDraining stops the reader of a connection being shut down gracefully.
	errDraining = errors.New("remoting: draining")
)

// Handler serves requests. Handle returns the response, or nil when there
// is none to send now (a deferred response is written later with
// Conn.WriteResponse, e.g. by long polling). Handle runs on its own
// goroutine (unless an InlineRunner has the reader run it) and may block,
// but while it runs it holds one of the connection's MaxInflightPerConn
// slots: a request that waits for long (a held pull) should return nil and
// be answered later instead. ctx is cancelled when the connection closes.
// The response's opaque, response flag and serialize type are set from the
// request.
type Handler interface {
	Handle(ctx context.Context, c *Conn, req *Command) *Command
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, c *Conn, req *Command) *Command

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, c *Conn, req *Command) *Command {
	return f(ctx, c, req)
}

// InlineRunner is implemented by a Handler with requests so quick to serve
// that handing them to a worker goroutine costs more than serving them:
// the connection's reader runs a request for which RunsInline reports true
// itself, and reads the next frame only after Handle returned. (Under load
// a handed-over request waits in the scheduler's run queue behind every
// other runnable goroutine; for a small send that wait was most of its
// latency.) Handle must then not wait for anything this connection's
// reader delivers (a response to a request sent on it), nor for long for
// anything else: the connection reads nothing meanwhile. Accounting (the
// in-flight slot, the response budget, a graceful drain) is the same as for
// any other request. RunsInline must be cheap; it sees the decoded request.
type InlineRunner interface {
	Handler
	RunsInline(req *Command) bool
}

// RunsInline reports whether h is an InlineRunner that runs req on the
// connection's reader (for handlers that delegate to another).
func RunsInline(h Handler, req *Command) bool {
	r, ok := h.(InlineRunner)
	return ok && r.RunsInline(req)
}

// BurstRunner is an InlineRunner that serves the inline requests of one
// read burst together (the broker stores the single-message sends a
// producer pipelined with one CommitLog write). The reader gathers the
// requests RunsInline reports true for while their frames are already
// buffered, one after the other, at most maxBurstRequests of them and
// about maxBurstBodyBytes of bodies, and calls HandleBurst with them in
// the order they came; it sets resps[i] to what Handle would have
// returned for reqs[i] (nil: none now, after Defer for instance), and
// Defer, borrowed bodies and the accounting of each request are as under
// Handle. The reader hands a burst over before it would wait for anything:
// when no complete frame is buffered, before a request that goes to a
// worker, before it waits for an in-flight slot or the response budget,
// and when it stops reading. HandleBurst is bound as Handle is for an
// inline request: it must not wait for what this connection's reader
// delivers, nor for long for anything else.
type BurstRunner interface {
	InlineRunner
	HandleBurst(ctx context.Context, c *Conn, reqs, resps []*Command)
}

// HandleBurst serves reqs as a BurstRunner does, with h's HandleBurst if
// h is one, else with one Handle each (for handlers that delegate to
// another).
func HandleBurst(ctx context.Context, h Handler, c *Conn, reqs, resps []*Command) {
	if b, ok := h.(BurstRunner); ok {
		b.HandleBurst(ctx, c, reqs, resps)
		return
	}
	for i, req := range reqs {
		resps[i] = h.Handle(ctx, c, req)
	}
}

// Burst limits (BurstRunner): the requests one burst gathers, and the
// body bytes after which it takes no more.
const (
	maxBurstRequests  = 64
	maxBurstBodyBytes = 1 << 20
)

// ExtLister is implemented by a Handler that reads the ext fields of the
// requests with some codes only through Command's accessors (Ext,
// LookupExt, ExtInt64, ExtInt32, ExtBool, RangeExt, ListedExts and
// ListedExt, SetExt), never ExtFields: the connection then decodes a JSON
// header's ext fields of such a request into a list, which costs one
// allocation where a map of a dozen fields costs several, and leaves
// ExtFields nil. A handler that
// wraps another passes ListsExt on only if it reads no ExtFields itself.
type ExtLister interface {
	Handler
	ListsExt(code int16) bool
}

// ListsExt reports whether h is an ExtLister that lists code (for
// handlers that delegate to another).
func ListsExt(h Handler, code int16) bool {
	l, ok := h.(ExtLister)
	return ok && l.ListsExt(code)
}

// connConfig is the part of ServerConfig/ClientConfig a Conn uses.
type connConfig struct {
	maxFrameBytes int
	idleTimeout   time.Duration // <= 0: none
	writeTimeout  time.Duration // <= 0: none
	maxInflight   int
	writeQueueLen int
	maxQueued     int64 // response byte budget (outBudget); <= 0: none
	logger        *slog.Logger
	// trustFrameLength: allocate each inbound frame at its announced
	// length at once (connections this process dialed, whose peer answers
	// its requests) instead of growing the buffer as bytes arrive, which
	// for a 300 KiB pull response allocated and copied twice its size.
	trustFrameLength bool
	traffic          *doorstats.Counters // nil: not counted
	// frameBudget: ServerConfig.FrameBudget (nil: none).
	frameBudget FrameBudget
}

// Write batching limits: one vectored write carries at most this many
// frames or (about) this many bytes.
const (
	maxBatchFrames = 128
	maxBatchBytes  = 4 << 20
	readBufBytes   = 32 << 10
)

type outFrame struct {
	head    *[]byte // pooled: length, header-length word, header
	body    []byte
	parts   [][]byte
	done    func() // the command's OnWritten
	charged int64  // bytes counted in the connection's outBudget
}

// size is the number of bytes the frame puts on the wire.
func (f *outFrame) size() int {
	n := len(*f.head) + len(f.body)
	for _, p := range f.parts {
		n += len(p)
	}
	return n
}

// release returns the head to the pool and runs the frame's OnWritten.
func (f *outFrame) release() {
	putHead(f.head)
	if f.done != nil {
		f.done()
	}
	*f = outFrame{}
}

var headPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledHeadBytes keeps unusually large headers out of the pool.
const maxPooledHeadBytes = 64 << 10

func putHead(hp *[]byte) {
	if cap(*hp) <= maxPooledHeadBytes {
		headPool.Put(hp)
	}
}

// Conn is one remoting connection, on the server or the client side.
type Conn struct {
	id      uint64
	nc      net.Conn
	cfg     connConfig
	handler atomic.Pointer[Handler]
	opaque  *atomic.Int32 // shared counter for requests we send

	ctx    context.Context // cancelled on close
	cancel context.CancelFunc

	outq   chan outFrame
	budget *outBudget
	// sendMu (read side: senders queueing a frame with OnWritten) and
	// sendClosed let the connection's end find every such frame left in
	// outq: once sendClosed is set under the write lock, no sender can
	// queue one, and run drains outq.
	sendMu     sync.RWMutex
	sendClosed bool
	sem        chan struct{}  // one slot per in-flight request
	handlers   sync.WaitGroup // requests being handled
	work       chan job       // unbuffered: to a parked worker
	parked     atomic.Int32   // workers waiting on work
	writerDone chan struct{}
	flushReq   chan struct{} // closed: write what is queued, then stop

	// Deferred responses (Reply.Send), queued without blocking: the
	// writer takes them with what outq holds. Guarded by replyMu, and by
	// sendMu like frames with OnWritten (none is queued after sendClosed).
	replyMu   sync.Mutex
	replies   []outFrame
	replyKick chan struct{} // one pending wake-up for the writer

	rdMu     sync.Mutex // guards draining and the read deadline
	draining bool

	pendMu     sync.Mutex
	pending    map[int32]call
	pendClosed bool // the connection closed: no call may be added
	sweeping   bool // the sweeper of InvokeAsync deadlines runs

	closeOnce sync.Once
	closeErr  error
	done      chan struct{}

	// The reader's burst of inline requests (BurstRunner), owned by the
	// reader goroutine.
	burst      []*Command
	burstResps []*Command
	burstH     BurstRunner
	burstHP    *Handler // the handler it was gathered with
	burstBytes int
}

func newConn(id uint64, nc net.Conn, cfg connConfig, h Handler, opaque *atomic.Int32) *Conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		id: id, nc: nc, cfg: cfg, opaque: opaque, ctx: ctx, cancel: cancel,
		outq:       make(chan outFrame, cfg.writeQueueLen),
		budget:     newOutBudget(cfg.maxQueued),
		sem:        make(chan struct{}, cfg.maxInflight),
		work:       make(chan job),
		writerDone: make(chan struct{}),
		flushReq:   make(chan struct{}),
		replyKick:  make(chan struct{}, 1),
		pending:    make(map[int32]call),
		done:       make(chan struct{}),
	}
	c.setHandler(h)
	return c
}

func (c *Conn) setHandler(h Handler) {
	if h != nil {
		c.handler.Store(&h)
	}
}

// ID is unique among the connections of one Server.
func (c *Conn) ID() uint64 { return c.id }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr is our address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// Done is closed when the connection is closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection closed, or nil while it is open.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.closeErr
	default:
		return nil
	}
}

// Close closes the connection at once; queued frames are dropped.
func (c *Conn) Close() error {
	c.closeWith(ErrClosed)
	return nil
}

func (c *Conn) closeWith(err error) {
	c.closeOnce.Do(func() {
		c.closeErr = err
		close(c.done)
		c.cancel()
		c.nc.Close()
	})
}

// WriteResponse queues a response (typically a deferred one). It sets the
// response flag; the opaque must be the request's (NewResponse does that).
// It blocks while the connection's queued responses fill its byte budget
// (ServerConfig.MaxQueuedBytesPerConn), until the peer reads or the
// connection closes.
func (c *Conn) WriteResponse(resp *Command) error {
	resp.Flag |= FlagResponse
	return c.send(resp, sendDeferred)
}

// BudgetStats returns the state of the connection's response byte budget.
func (c *Conn) BudgetStats() BudgetStats { return c.budget.stats() }

// Invoke sends a request and waits for its response, ctx's end or the
// connection's close. The opaque is assigned here.
func (c *Conn) Invoke(ctx context.Context, req *Command) (*Command, error) {
	req.Flag &^= FlagResponse | FlagOneway
	req.Opaque = c.opaque.Add(1)
	ch := respChanPool.Get().(chan *Command)
	c.pendMu.Lock()
	c.pending[req.Opaque] = call{ch: ch}
	c.pendMu.Unlock()
	received := false
	defer func() {
		c.pendMu.Lock()
		_, unclaimed := c.pending[req.Opaque]
		delete(c.pending, req.Opaque)
		c.pendMu.Unlock()
		// The channel is empty and nobody else holds it if its response
		// was received, or if deliver never took it from pending; else a
		// response may still arrive on it, and it is left to the GC.
		if received || unclaimed {
			respChanPool.Put(ch)
		}
	}()
	if err := c.send(req, sendRequest); err != nil {
		return nil, err
	}
	select {
	case resp := <-ch:
		received = true
		return resp, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("remoting: %s opaque %d to %s: %w", RequestCode(req.Code), req.Opaque, c.RemoteAddr(), ctx.Err())
	case <-c.done:
		return nil, fmt.Errorf("remoting: %s opaque %d to %s: %w", RequestCode(req.Code), req.Opaque, c.RemoteAddr(), c.closeErr)
	}
}

// respChanPool holds the empty one-slot channels Invoke waits on.
var respChanPool = sync.Pool{New: func() any { return make(chan *Command, 1) }}

// call is a request waiting for its response: Invoke waits on ch; an
// InvokeAsync request has done and a deadline instead.
type call struct {
	ch       chan *Command
	done     func(*Command, error)
	deadline time.Time
	code     int16
}

// sweepInterval is how often a connection with InvokeAsync requests looks
// for expired ones: a timeout fires up to this late.
const sweepInterval = 100 * time.Millisecond

// InvokeAsync sends a request without waiting for its response. If it
// returns nil, done is called exactly once: with the response, or with an
// error when timeout passes first (wrapping context.DeadlineExceeded) or
// the connection closes. If it returns an error, done is never called.
// done runs on the connection's reader (or its sweeper): it must not block
// and must not wait for another response on this connection.
//
// req's OnWritten runs once the frame is written or dropped, which may be
// after done: buffers the request lends (Body, BodyParts) are free only
// then.
func (c *Conn) InvokeAsync(req *Command, timeout time.Duration, done func(*Command, error)) error {
	req.Flag &^= FlagResponse | FlagOneway
	req.Opaque = c.opaque.Add(1)
	c.pendMu.Lock()
	if c.pendClosed {
		c.pendMu.Unlock()
		req.written()
		return c.closeErr
	}
	c.pending[req.Opaque] = call{done: done, deadline: time.Now().Add(timeout), code: req.Code}
	if !c.sweeping {
		c.sweeping = true
		go c.sweep()
	}
	c.pendMu.Unlock()
	if err := c.send(req, sendRequest); err != nil {
		c.pendMu.Lock()
		_, ours := c.pending[req.Opaque]
		delete(c.pending, req.Opaque)
		c.pendMu.Unlock()
		if ours {
			return err
		}
		// The sweeper or the connection's end took the call: it has
		// called (or is calling) done.
	}
	return nil
}

// sweep fails the InvokeAsync requests whose deadline has passed, every
// sweepInterval until the connection closes.
func (c *Conn) sweep() {
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	var expired []asyncCall
	for {
		select {
		case <-c.done:
			return
		case now := <-t.C:
			expired = c.takeAsync(expired[:0], false, func(cl call) bool { return now.After(cl.deadline) })
			for _, e := range expired {
				e.done(nil, fmt.Errorf("remoting: %s opaque %d to %s: no response by its deadline: %w",
					RequestCode(e.code), e.op, c.RemoteAddr(), context.DeadlineExceeded))
			}
		}
	}
}

// failPending fails every InvokeAsync request still waiting once the
// connection has closed, and lets no new one wait. (Invoke callers wake on
// done themselves.)
func (c *Conn) failPending() {
	for _, f := range c.takeAsync(nil, true, func(call) bool { return true }) {
		f.done(nil, fmt.Errorf("remoting: %s opaque %d to %s: %w", RequestCode(f.code), f.op, c.RemoteAddr(), c.closeErr))
	}
}

// asyncCall is an InvokeAsync call taken from pending, with its opaque.
type asyncCall struct {
	op int32
	call
}

// takeAsync removes the InvokeAsync calls that match from pending and
// appends them to dst, for the caller to complete outside the lock;
// closing also bars new calls.
func (c *Conn) takeAsync(dst []asyncCall, closing bool, match func(call) bool) []asyncCall {
	c.pendMu.Lock()
	defer c.pendMu.Unlock()
	if closing {
		c.pendClosed = true
	}
	for op, cl := range c.pending {
		if cl.done != nil && match(cl) {
			dst = append(dst, asyncCall{op, cl})
			delete(c.pending, op)
		}
	}
	return dst
}

// InvokeOneway sends a request with the oneway flag set; no response is
// expected.
func (c *Conn) InvokeOneway(req *Command) error {
	req.Flag = req.Flag&^FlagResponse | FlagOneway
	req.Opaque = c.opaque.Add(1)
	return c.send(req, sendRequest)
}

// send encodes the frame head and queues it with the body for the writer.
// It blocks while the write queue is full and, for responses, while the
// byte budget has no room (see outBudget). cmd.OnWritten moves to the
// queued frame (the writer calls it), or runs here if the frame is dropped.
func (c *Conn) send(cmd *Command, kind sendKind) error {
	f, err := c.prepare(cmd)
	if err != nil {
		if kind == sendHandlerResponse {
			c.budget.handlerDone()
		}
		return err
	}
	if !c.budget.acquire(f.charged, kind, c.done) {
		f.release()
		return c.closeErr
	}
	if f.done == nil {
		return c.enqueue(f)
	}
	c.sendMu.RLock()
	defer c.sendMu.RUnlock()
	if c.sendClosed {
		c.drop(&f)
		return c.closeErr
	}
	return c.enqueue(f)
}

// prepare encodes cmd's frame head; on an error (or a closed connection)
// it runs cmd's OnWritten. The frame's charge is its size on the wire, or
// cmd.HeldBytes if that is more.
func (c *Conn) prepare(cmd *Command) (outFrame, error) {
	select {
	case <-c.done:
		cmd.written()
		return outFrame{}, c.closeErr
	default:
	}
	hp := headPool.Get().(*[]byte)
	head, err := appendFrameHead((*hp)[:0], cmd)
	if err != nil {
		putHead(hp)
		cmd.written()
		return outFrame{}, err
	}
	bodyLen := cmd.BodyLen()
	if size := len(head) - 4 + bodyLen; size > c.cfg.maxFrameBytes {
		putHead(hp)
		cmd.written()
		return outFrame{}, fmt.Errorf("%w: %d bytes exceed the limit of %d", ErrFrameTooLarge, size, c.cfg.maxFrameBytes)
	}
	*hp = head
	if cmd.IsResponse() && IsErrorCode(cmd.Code) {
		c.cfg.traffic.Error()
	}
	f := outFrame{head: hp, body: cmd.Body, parts: cmd.BodyParts, done: cmd.OnWritten,
		charged: int64(max(len(head)+bodyLen, cmd.HeldBytes))}
	cmd.OnWritten = nil
	return f, nil
}

// enqueue hands f to the writer; if the connection closes first, f is
// dropped here.
func (c *Conn) enqueue(f outFrame) error {
	select {
	case c.outq <- f:
		return nil
	case <-c.done:
		c.drop(&f)
		return c.closeErr
	}
}

// drop releases a counted frame that will not be written: its budget and
// its buffers (OnWritten).
func (c *Conn) drop(f *outFrame) {
	c.budget.release(f.charged)
	f.release()
}

// dropQueued releases the frames the writer will never write, after the
// connection closed and the writer stopped. Senders holding sendMu leave
// promptly (done is closed), so taking it cannot block for long.
func (c *Conn) dropQueued() {
	c.sendMu.Lock()
	c.sendClosed = true
	c.sendMu.Unlock()
	c.dropReplies()
	for {
		select {
		case f := <-c.outq:
			c.drop(&f)
		default:
			return
		}
	}
}

// run serves the connection until it closes: it starts the writer, runs
// the reader, and on a graceful drain waits for in-flight handlers and
// flushes their responses before closing. onClose runs last.
func (c *Conn) run(onClose func(*Conn)) {
	go c.writeLoop()
	err := c.readLoop()
	if errors.Is(err, errDraining) {
		if c.waitHandlers() {
			close(c.flushReq)
			<-c.writerDone
		}
		err = ErrServerClosed
	}
	if cause := c.Err(); cause != nil {
		err = cause // closed by us (Close, a write failure): that is the reason
	}
	c.logClose(err)
	c.closeWith(err)
	c.failPending()
	<-c.writerDone
	c.dropQueued()
	if onClose != nil {
		onClose(c)
	}
}

// waitHandlers waits for in-flight handlers; false if the connection was
// closed first.
func (c *Conn) waitHandlers() bool {
	finished := make(chan struct{})
	go func() {
		c.handlers.Wait()
		close(finished)
	}()
	select {
	case <-finished:
		return true
	case <-c.done:
		return false
	}
}

func (c *Conn) logClose(err error) {
	log := c.cfg.logger.With("conn", c.id, "remote", c.RemoteAddr().String())
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, ErrServerClosed),
		errors.Is(err, ErrClosed), errors.Is(err, syscall.ECONNRESET):
		log.Debug("remoting: connection closed", "err", err)
	case errors.Is(err, ErrIdleTimeout):
		log.Info("remoting: closing idle connection", "idle_timeout", c.cfg.idleTimeout)
	default:
		c.cfg.traffic.Error()
		log.Warn("remoting: closing connection", "err", err)
	}
}

// readLoop reads frames until an error, dispatching requests to handler
// goroutines and responses to waiting invokers; a burst of inline
// requests gathered when it stops is served before it returns.
func (c *Conn) readLoop() error {
	err := c.readFrames()
	c.runBurst()
	return err
}

func (c *Conn) readFrames() error {
	br := bufio.NewReaderSize(c.nc, readBufBytes)
	for {
		if frameBuffered(br) {
			// Reading it does not wait: no idle deadline to move.
			if c.isDraining() {
				return errDraining
			}
		} else {
			c.runBurst() // the next read may wait
			if err := c.armReadDeadline(); err != nil {
				return err
			}
		}
		var h Handler
		hp := c.handler.Load()
		if hp != nil {
			h = *hp
		}
		if hp != c.burstHP {
			c.runBurst() // gathered for the handler before
			c.burstHP = hp
		}
		borrower, _ := h.(BodyBorrower)
		claimed, err := c.claimNextFrame(br)
		if err != nil {
			return c.readError(err)
		}
		p, err := readFrame(br, c.cfg.maxFrameBytes, borrower != nil, c.cfg.trustFrameLength)
		if err != nil {
			c.returnFrameClaim(claimed)
			return c.readError(err)
		}
		c.cfg.traffic.In(4 + len(p))
		lister, _ := h.(ExtLister)
		cmd, err := decodePayloadFor(p, lister)
		c.returnFrameClaim(claimed)
		if err != nil {
			return err
		}
		if cmd.IsResponse() {
			c.deliver(cmd)
			continue
		}
		c.cfg.traffic.Request()
		if borrower != nil && borrower.BorrowsBody(cmd.Code) {
			cmd.frame = p
		}
		if !c.tryAcquire() {
			c.runBurst() // its requests may hold the slots
			if err := c.acquire(); err != nil {
				return err
			}
		}
		if !c.budget.tryAdmit() {
			c.runBurst() // its requests count as running
			if !c.budget.admit(c.done) {
				<-c.sem
				return c.closeErr
			}
		}
		c.handlers.Add(1)
		if RunsInline(h, cmd) {
			if bh, ok := h.(BurstRunner); ok {
				c.gatherInline(bh, cmd)
				continue
			}
			c.handle(h, cmd) // on this goroutine: see InlineRunner
			continue
		}
		c.runBurst() // served before what comes after it
		select {
		case c.work <- job{h, cmd}: // an idle worker takes it
		default:
			go c.worker(h, cmd)
		}
	}
}

// frameBuffered reports whether br holds the whole next frame, so that
// reading it does not wait.
func frameBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n < 4 {
		return false
	}
	b, err := br.Peek(4)
	return err == nil && int64(n) >= 4+int64(binary.BigEndian.Uint32(b))
}

// gatherInline adds an admitted inline request to the burst, serving the
// burst when it is full.
func (c *Conn) gatherInline(h BurstRunner, req *Command) {
	c.burstH = h
	c.burst = append(c.burst, req)
	c.burstBytes += len(req.Body)
	if len(c.burst) >= maxBurstRequests || c.burstBytes >= maxBurstBodyBytes {
		c.runBurst()
	}
}

// runBurst serves the gathered burst (BurstRunner) and ends each of its
// requests as handle does.
func (c *Conn) runBurst() {
	if len(c.burst) == 0 {
		return
	}
	reqs := c.burst
	resps := slices.Grow(c.burstResps[:0], len(reqs))[:len(reqs)]
	ok := c.callBurst(reqs, resps)
	for i, req := range reqs {
		c.finish(req, resps[i], ok)
	}
	clear(reqs)
	clear(resps)
	c.burst, c.burstResps, c.burstH, c.burstBytes = reqs[:0], resps[:0], nil, 0 // burstHP stays: it is the reader's
}

// callBurst runs the burst's handler; after a panic every request gets
// SYSTEM_ERROR (ok = false).
func (c *Conn) callBurst(reqs, resps []*Command) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			c.cfg.logger.Error("remoting: handler panic", "code", RequestCode(reqs[0].Code).String(), "burst", len(reqs),
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			for i, req := range reqs {
				resps[i] = req.NewResponse(ResSystemError, "internal error")
			}
			ok = false
		}
	}()
	c.burstH.HandleBurst(c.ctx, c, reqs, resps)
	return true
}

// claimNextFrame claims the next frame's bytes (ServerConfig.FrameBudget)
// once its length has arrived and returns how many it claimed; a length
// beyond the limit is left for readFrame to refuse.
func (c *Conn) claimNextFrame(br *bufio.Reader) (int64, error) {
	if c.cfg.frameBudget == nil {
		return 0, nil
	}
	b, err := br.Peek(4)
	if err != nil {
		return 0, err
	}
	n := int64(binary.BigEndian.Uint32(b))
	if n > int64(c.cfg.maxFrameBytes) {
		return 0, nil
	}
	if !c.cfg.frameBudget.ClaimBytes(n+4, c.done) {
		if err := c.Err(); err != nil {
			return 0, err
		}
		return 0, net.ErrClosed
	}
	return n + 4, nil
}

// returnFrameClaim gives back what claimNextFrame claimed.
func (c *Conn) returnFrameClaim(n int64) {
	if n > 0 {
		c.cfg.frameBudget.ReleaseBytes(n)
	}
}

// readError maps a read deadline forced by a drain to errDraining.
func (c *Conn) readError(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.rdMu.Lock()
		draining := c.draining
		c.rdMu.Unlock()
		if draining {
			return errDraining
		}
		return fmt.Errorf("%w: no complete frame for %v", ErrIdleTimeout, c.cfg.idleTimeout)
	}
	return err
}

// armReadDeadline sets the idle deadline for the next frame, unless a
// drain has begun (the drain's past deadline must not be overwritten).
func (c *Conn) armReadDeadline() error {
	c.rdMu.Lock()
	defer c.rdMu.Unlock()
	if c.draining {
		return errDraining
	}
	if c.cfg.idleTimeout > 0 {
		return c.nc.SetReadDeadline(time.Now().Add(c.cfg.idleTimeout))
	}
	return nil
}

// isDraining reports whether a drain has begun.
func (c *Conn) isDraining() bool {
	c.rdMu.Lock()
	defer c.rdMu.Unlock()
	return c.draining
}

// beginDrain stops the reader; in-flight requests still complete.
func (c *Conn) beginDrain() {
	c.rdMu.Lock()
	defer c.rdMu.Unlock()
	c.draining = true
	c.nc.SetReadDeadline(time.Unix(1, 0))
}

// tryAcquire takes an in-flight slot if one is free.
func (c *Conn) tryAcquire() bool {
	select {
	case c.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// acquire takes an in-flight slot, blocking (and so not reading) while
// MaxInflightPerConn requests are running.
func (c *Conn) acquire() error {
	select {
	case c.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-c.done:
		return c.closeErr
	}
}

func (c *Conn) deliver(resp *Command) {
	c.pendMu.Lock()
	cl, ok := c.pending[resp.Opaque]
	delete(c.pending, resp.Opaque)
	c.pendMu.Unlock()
	switch {
	case !ok:
		c.cfg.logger.Debug("remoting: response for unknown opaque", "conn", c.id, "opaque", resp.Opaque, "code", resp.Code)
	case cl.done != nil:
		cl.done(resp, nil)
	default:
		cl.ch <- resp // buffered; a response is delivered at most once
	}
}

// handlerStackReserve is the stack a request goroutine reserves before it
// calls the handler. A new goroutine starts with a small stack; a handler
// that goes deeper (the broker's send path reaches about 12 KiB) made the
// runtime copy the whole deep stack mid-request, which cost several
// microseconds per request in CPU profiles. Growing it first, while the
// stack holds one frame, makes that copy trivial.
const handlerStackReserve = 10 << 10

// reserveStack grows the goroutine's stack to hold handlerStackReserve more
// bytes. The array must be kept by the compiler, hence the sink.
//
//go:noinline
func reserveStack() {
	var b [handlerStackReserve]byte
	stackSink(b[:])
}

//go:noinline
func stackSink([]byte) {}

// job is a request handed from the reader to an idle worker.
type job struct {
	h   Handler
	req *Command
}

// worker runs the request it was started with, then the requests the
// reader hands it while it waits idle, until the connection closes.
// Reusing a goroutine saves its creation and growing a fresh stack to the
// handler's depth. A connection keeps at most MaxInflightPerConn workers
// waiting (as many as may run at once: a pipelining peer's requests come
// in waves of its whole pipeline; 64 kept reused only 30-40 % of them);
// an idle worker's stack is shrunk by the GC. Request accounting (the
// in-flight slot, handlers, the budget) stays per request, in handle.
func (c *Conn) worker(h Handler, req *Command) {
	// Once per goroutine: a reused one has its stack grown already (unless
	// the GC shrank it while idle; the handler then grows it once). Per
	// request, zeroing the reserve cost more than creating the goroutine.
	reserveStack()
	for {
		c.handle(h, req)
		h, req = nil, nil // hold nothing of the request while idle
		if c.parked.Add(1) > int32(c.cfg.maxInflight) {
			c.parked.Add(-1)
			return
		}
		select {
		case j := <-c.work:
			c.parked.Add(-1)
			h, req = j.h, j.req
		case <-c.done:
			c.parked.Add(-1)
			return
		}
	}
}

// handle runs h for one request and queues its response. A request whose
// frame buffer h only borrows (req.frame set) gives the buffer back once
// the response is queued, unless the handler panicked, asked to keep the
// body, or returned a response whose body aliases the buffer; always before
// the request ends (a drain that waited for it finds the buffer released).
// A request the handler deferred (Defer, then nil) is ended by its
// Reply.Send.
func (c *Conn) handle(h Handler, req *Command) {
	resp, ok := c.callHandler(h, req)
	c.finish(req, resp, ok)
}

// finish ends a request its handler returned resp for (ok = false: it
// panicked), as handle describes.
func (c *Conn) finish(req, resp *Command, ok bool) {
	frame := req.frame
	req.frame = nil
	if frame != nil && (!ok || req.keepBody || resp.aliases(frame)) {
		frame = nil // not the connection's to reuse
	}
	if r := req.reply; r != nil {
		if resp == nil {
			releaseFrame(req, frame)
			if r.handOff() {
				return // Send ends the request
			}
			c.endRequest() // Send came first and queued the response
			return
		}
		r.abandon()
	}
	if resp == nil || req.IsOneway() {
		if resp != nil {
			resp.written()
		}
		releaseFrame(req, frame)
		c.endRequest()
		return
	}
	resp.Opaque = req.Opaque
	resp.Flag |= FlagResponse
	resp.SerializeType = req.SerializeType
	err := c.send(resp, sendHandlerResponse) // ends the budget admission
	releaseFrame(req, frame)
	<-c.sem
	c.handlers.Done()
	if err != nil {
		c.cfg.logger.Debug("remoting: response not sent", "conn", c.id, "code", RequestCode(req.Code).String(), "err", err)
	}
}

// releaseFrame gives a borrowed request's frame buffer back for reuse
// (nil: nothing to give back).
func releaseFrame(req *Command, frame []byte) {
	if frame != nil {
		req.Body = nil
		frames.put(frame)
	}
}

// endRequest ends a request that queued no response of its own: its
// budget admission, its in-flight slot, and its count for a drain.
func (c *Conn) endRequest() {
	c.budget.handlerDone()
	<-c.sem
	c.handlers.Done()
}

// callHandler runs h, turning a panic into SYSTEM_ERROR (ok = false).
func (c *Conn) callHandler(h Handler, req *Command) (resp *Command, ok bool) {
	if h == nil {
		return req.NewResponse(ResRequestCodeNotSupported, fmt.Sprintf("request type %d not supported", req.Code)), true
	}
	defer func() {
		if r := recover(); r != nil {
			c.cfg.logger.Error("remoting: handler panic", "code", RequestCode(req.Code).String(),
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, ok = req.NewResponse(ResSystemError, "internal error"), false
		}
	}()
	return h.Handle(c.ctx, c, req), true
}

// writeLoop writes queued frames, batching whatever is queued into one
// vectored write. It stops on close, or after flushing on flushReq.
func (c *Conn) writeLoop() {
	defer close(c.writerDone)
	batch := make([]outFrame, 0, maxBatchFrames)
	scratch := make(net.Buffers, 0, 2*maxBatchFrames)
	scratchp := &scratch
	lastBatch := 0
	for {
		select {
		case f := <-c.outq:
			batch = append(batch, f)
		case <-c.replyKick:
		case <-c.flushReq:
			c.flushQueued(batch, scratchp)
			return
		case <-c.done:
			return
		}
		if len(c.outq) == 0 && (lastBatch > 1 || len(c.sem) > 0) {
			// More frames are likely on their way: handlers of this
			// connection are still running, or the last write carried
			// several frames (pipelined senders). Let those goroutines run
			// first, so that one write carries many frames instead of one
			// each (a loaded connection made about one write per frame).
			// A lone request-response exchange does not wait here.
			runtime.Gosched()
		}
		batch = c.gather(batch)
		lastBatch = len(batch)
		if len(batch) == 0 {
			continue // a kick for replies another round took
		}
		if err := c.writeBatch(batch, scratchp); err != nil {
			c.closeWith(fmt.Errorf("remoting: write: %w", err))
			return
		}
		batch = batch[:0]
	}
}

// gather adds already-queued frames and deferred responses to batch
// without blocking.
func (c *Conn) gather(batch []outFrame) []outFrame {
	size := 0
	for len(batch) < maxBatchFrames && size < maxBatchBytes {
		select {
		case f := <-c.outq:
			batch = append(batch, f)
			size += f.size()
			continue
		default:
		}
		break
	}
	return c.takeReplies(batch, maxBatchFrames)
}

// flushQueued writes everything still queued; used by a graceful drain.
func (c *Conn) flushQueued(batch []outFrame, scratch *net.Buffers) {
	for {
		batch = c.gather(batch)
		if len(batch) == 0 {
			return
		}
		if err := c.writeBatch(batch, scratch); err != nil {
			c.closeWith(fmt.Errorf("remoting: write: %w", err))
			return
		}
		batch = batch[:0]
	}
}

// writeBatch writes batch with one vectored write; scratch is reused
// backing storage for the buffer list. Every frame is released afterwards,
// written or not.
func (c *Conn) writeBatch(batch []outFrame, scratch *net.Buffers) error {
	bufs := (*scratch)[:0]
	for _, f := range batch {
		bufs = append(bufs, *f.head)
		if len(f.body) > 0 {
			bufs = append(bufs, f.body)
		}
		for _, p := range f.parts {
			if len(p) > 0 {
				bufs = append(bufs, p)
			}
		}
	}
	var err error
	if c.cfg.writeTimeout > 0 {
		err = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.writeTimeout))
	}
	if err == nil {
		// WriteTo consumes its receiver; *scratch (already on the heap)
		// serves as it, so that the call allocates nothing.
		*scratch = bufs
		var n int64
		n, err = scratch.WriteTo(c.nc)
		c.cfg.traffic.Out(int(n))
	}
	for i := range batch {
		c.drop(&batch[i])
	}
	clear(bufs) // drop references to released buffers
	*scratch = bufs[:0]
	return err
}
