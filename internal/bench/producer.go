package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// Message body layout: every body starts with a 16-byte stamp that the
// consumers read for the end-to-end latency; the rest is a fixed pattern.
//
//	0      8              16           messageSize
//	+------+--------------+------------+
//	| sent | bodyMagic    | pattern... |
//	+------+--------------+------------+
//	sent: int64 big-endian Unix nanoseconds when the request was made
const (
	stampBytes = 16
	bodyMagic  = "keelbnch"
)

// sendTimeout bounds one send request: it fails after at most this long
// and at least half of it (a sender renews its deadline only when less
// than half is left, so that most sends make no context and timer).
const sendTimeout = 30 * time.Second

// Pacer spaces requests to a rate: request n of the pacer may go at
// start + n*interval. Workers sharing it claim slots in turn, so the rate
// holds whatever the number of workers. A pacer that falls behind sends at
// once until it catches up (open loop). Safe for concurrent use.
type Pacer struct {
	start    time.Time
	interval time.Duration
	next     atomic.Int64
}

// NewPacer returns a pacer of requestsPerSec, or nil (unpaced) for 0.
func NewPacer(requestsPerSec float64) *Pacer {
	if requestsPerSec <= 0 {
		return nil
	}
	return &Pacer{start: time.Now(), interval: time.Duration(float64(time.Second) / requestsPerSec)}
}

// Wait blocks until the next slot or until stop is closed (false). A nil
// pacer never waits.
func (p *Pacer) Wait(stop <-chan struct{}) bool { return p.wait(stop, nil) }

// wait is Wait with the caller's timer if t is not nil (a single sender
// reuses one instead of making one per request).
func (p *Pacer) wait(stop <-chan struct{}, t *time.Timer) bool {
	if p == nil {
		return true
	}
	at := p.start.Add(time.Duration(p.next.Add(1)-1) * p.interval)
	d := time.Until(at)
	if d < 100*time.Microsecond {
		return true
	}
	if t == nil {
		t = time.NewTimer(d)
		defer t.Stop()
	} else {
		t.Reset(d)
	}
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// producer is one connection with its senders: workers goroutines that
// each send one request and wait for its answer (a workload's
// syncSenders), or one goroutine keeping up to workers requests in flight
// (inflightPerProducer; see runAsync).
type producer struct {
	cl      *remoting.Client
	queues  []MessageQueue // writable queues of every topic on this broker
	w       *Workload
	st      *stats
	group   string
	nextQ   atomic.Uint64
	pace    atomic.Pointer[Pacer]
	workers int
	// acked counts acknowledged messages per queue; the map is built
	// before the senders start and only read afterwards.
	acked map[MessageQueue]*atomic.Uint64
}

func (p *producer) setRate(msgsPerSec float64) {
	p.pace.Store(NewPacer(msgsPerSec / float64(p.w.BatchSize)))
}

// run starts the senders and returns when all have seen stop and their
// last request has completed.
func (p *producer) run(stop <-chan struct{}) {
	if p.w.SyncSenders == 0 {
		p.runAsync(stop)
		return
	}
	var wg sync.WaitGroup
	for i := 0; i < p.workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.sender(stop)
		}()
	}
	wg.Wait()
}

func (p *producer) sender(stop <-chan struct{}) {
	s := newSendBuffers(p.w, p.group)
	defer s.cancel()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if !p.pace.Load().Wait(stop) {
			return
		}
		q := p.queues[p.nextQ.Add(1)%uint64(len(p.queues))]
		p.sendOne(s, q)
	}
}

func (p *producer) sendOne(s *sendBuffers, q MessageQueue) {
	start := time.Now()
	req := s.request(q, start)
	resp, err := p.cl.Invoke(s.sendContext(start), req)
	p.record(q, start, resp, err)
}

// record counts the outcome of a send to q made at start.
func (p *producer) record(q MessageQueue, start time.Time, resp *remoting.Command, err error) {
	lat := time.Since(start)
	switch {
	case err != nil:
		p.st.sendErrors.Add(1)
		p.st.countError("send: " + transportErrorKind(err))
	case resp.Code != remoting.ResSuccess:
		p.st.sendErrors.Add(1)
		p.st.countError(fmt.Sprintf("send: code %d %s", resp.Code, truncate(resp.Remark, 60)))
	default:
		p.st.sendLat.Record(lat)
		p.acked[q].Add(uint64(p.w.BatchSize))
		p.st.sent.Add(uint64(p.w.BatchSize))
		p.st.sentBytes.Add(uint64(p.w.BatchSize * p.w.MessageSize))
	}
}

// runAsync sends from this goroutine alone, paced, keeping up to
// p.workers requests in flight: the connection's reader completes each
// one (asyncSend.done), so a request costs no goroutine wake-up of its
// own, as with the official clients' asynchronous send. It returns once
// stop is closed and every request in flight has completed.
func (p *producer) runAsync(stop <-chan struct{}) {
	a := &asyncSender{p: p, slots: make(chan struct{}, p.workers), free: make(chan *asyncSend, p.workers)}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	defer a.inflight.Wait()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if !p.pace.Load().wait(stop, timer) {
			return
		}
		select {
		case a.slots <- struct{}{}:
		case <-stop:
			return
		}
		s := a.get()
		s.q = p.queues[p.nextQ.Add(1)%uint64(len(p.queues))]
		s.start = time.Now()
		req := s.request(s.q, s.start)
		req.OnWritten = s.written
		s.refs.Store(2) // the response (or failure) and OnWritten
		a.inflight.Add(1)
		if err := p.cl.InvokeAsync(req, sendTimeout, s.done); err != nil {
			s.done(nil, err) // refused: done is ours to call; OnWritten has run
		}
	}
}

// asyncSender is runAsync's state: a token in slots per request in
// flight, and the send buffers free for reuse.
type asyncSender struct {
	p        *producer
	slots    chan struct{}
	free     chan *asyncSend
	inflight sync.WaitGroup
}

// asyncSend is one request of runAsync: its buffers, queue and send time.
// It is reused once both the outcome is recorded and the connection has
// written (or dropped) the frame, whichever comes last: until then the
// connection may still read the body.
type asyncSend struct {
	*sendBuffers
	a     *asyncSender
	q     MessageQueue
	start time.Time
	refs  atomic.Int32
	// Method values made once, so that a send allocates no closure.
	written func()
	done    func(*remoting.Command, error)
}

func (a *asyncSender) get() *asyncSend {
	select {
	case s := <-a.free:
		return s
	default:
	}
	s := &asyncSend{sendBuffers: newSendBuffers(a.p.w, a.p.group), a: a}
	s.written, s.done = s.unref, s.complete
	return s
}

// complete records the outcome and frees the in-flight slot; it runs on
// the connection's reader or sweeper, or in runAsync for a refused send.
func (s *asyncSend) complete(resp *remoting.Command, err error) {
	s.a.p.record(s.q, s.start, resp, err)
	<-s.a.slots
	s.a.inflight.Done()
	s.unref()
}

func (s *asyncSend) unref() {
	if s.refs.Add(-1) != 0 {
		return
	}
	select {
	case s.a.free <- s:
	default: // more buffers than slots for a moment: let this one go
	}
}

// transportErrorKind names a transport error without its varying details
// (opaque, addresses), so the error table stays small.
func transportErrorKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	default:
		return "transport error (connection closed or failed)"
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// sendBuffers are one sender's reusable request, header and body. The
// remoting connection has written the frame before Invoke returns, so the
// next request may reuse them.
type sendBuffers struct {
	w       *Workload
	req     remoting.Command
	ext     map[string]string
	body    []byte // the message body, or the batch body
	payload []byte // one message body (batch items are built from it)
	k       *[13]string
	// ctx bounds the sends until deadline; cancel releases it.
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time
}

// sendContext returns a context that ends between sendTimeout/2 and
// sendTimeout after now.
func (s *sendBuffers) sendContext(now time.Time) context.Context {
	if s.ctx == nil || s.deadline.Sub(now) < sendTimeout/2 {
		s.cancel()
		s.deadline = now.Add(sendTimeout)
		s.ctx, s.cancel = context.WithDeadline(context.Background(), s.deadline)
	}
	return s.ctx
}

// StampBody writes the send stamp (time now, magic) into the first 16
// bytes of body and a fixed pattern into the rest.
func StampBody(body []byte, now time.Time) {
	binary.BigEndian.PutUint64(body, uint64(now.UnixNano()))
	copy(body[8:], bodyMagic)
	for i := stampBytes; i < len(body); i++ {
		body[i] = byte('a' + i%26)
	}
}

func newSendBuffers(w *Workload, group string) *sendBuffers {
	s := &sendBuffers{w: w, ext: make(map[string]string, 13), k: &remoting.SendKeysV1, cancel: func() {}}
	code := int16(remoting.ReqSendMessage)
	if w.BatchSize > 1 {
		code, s.k = remoting.ReqSendBatchMessage, &remoting.SendKeysV2
	}
	s.req = *remoting.NewRequest(code, s.ext, nil)
	k := s.k
	for i, v := range []string{group, "", "TBW102", "4", "", "0", "", "0", "", "0", "false", "16", strconv.FormatBool(w.BatchSize > 1)} {
		s.ext[k[i]] = v
	}
	s.payload = make([]byte, w.MessageSize)
	for i := stampBytes; i < len(s.payload); i++ {
		s.payload[i] = byte('a' + i%26)
	}
	copy(s.payload[8:], bodyMagic)
	return s
}

// request fills the reusable request for queue q, stamped with now.
func (s *sendBuffers) request(q MessageQueue, now time.Time) *remoting.Command {
	s.ext[s.k[remoting.SendTopic]] = q.Topic
	s.ext[s.k[remoting.SendQueueID]] = strconv.Itoa(int(q.QueueID))
	s.ext[s.k[remoting.SendBornTimestamp]] = strconv.FormatInt(now.UnixMilli(), 10)
	binary.BigEndian.PutUint64(s.payload, uint64(now.UnixNano()))
	if s.w.BatchSize == 1 {
		s.body = s.payload
	} else {
		s.body = s.body[:0]
		for range s.w.BatchSize {
			s.body, _ = message.AppendBatchItem(s.body, message.BatchItem{Body: s.payload}) // sizes validated
		}
	}
	s.req.Flag, s.req.Opaque, s.req.Body = 0, 0, s.body
	return &s.req
}
