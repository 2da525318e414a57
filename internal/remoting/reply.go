package remoting

import "sync/atomic"

// Reply is the response to a request that its handler gives after it has
// returned (Conn.Defer). It exists so that a request waiting for something
// slow (the broker's sends waiting for their group commit) holds no
// goroutine: the handler registers a callback and returns, and whatever
// completes the wait calls Send, which never blocks.
type Reply struct {
	c     *Conn
	req   *Command
	state atomic.Int32
}

// Reply states. A reply starts replyRunning (its handler has not
// returned); the handler's return (in Conn.handle) and Send race to move
// it on, and whichever comes second ends the request.
const (
	replyRunning   int32 = iota // handler running, no Send yet
	replySent                   // Send called while the handler ran
	replyHandedOff              // the handler returned nil: Send ends the request
	replyDone                   // sent after hand-off, or abandoned: later Sends are dropped
)

// Defer lets the handler of req answer it later with the returned Reply's
// Send, from any goroutine; the handler then returns nil. Until Send, the
// request keeps what a running handler holds: its in-flight slot
// (MaxInflightPerConn), its place in the response budget, and a graceful
// shutdown waits for it. A handler that calls Defer must answer through
// the Reply: a response it returns instead is sent, and a later Send is
// dropped. Calling Defer again returns the same Reply.
func (c *Conn) Defer(req *Command) *Reply {
	if req.reply == nil {
		req.reply = &Reply{c: c, req: req}
	}
	return req.reply
}

// DeferIn is Defer with the Reply made in r, for a handler that embeds
// it in a value it makes per request anyway (no allocation of its own).
// r must be a zero Reply, not used for any other request; if req was
// deferred already, its Reply is returned and r is left alone.
func (c *Conn) DeferIn(req *Command, r *Reply) *Reply {
	if req.reply == nil {
		r.c, r.req = c, req
		req.reply = r
	}
	return req.reply
}

// Send queues resp as the response to the deferred request. It never
// blocks: the frame is queued past the write queue and the budget's wait
// (the budget still counts it), since the request's slot already bounds
// how many such responses a connection can have. A response to a oneway
// request, a second Send, and a Send on a closed connection are dropped
// (resp.OnWritten runs). The opaque, flags and serialize type are set from
// the request.
func (r *Reply) Send(resp *Command) {
	for {
		switch s := r.state.Load(); s {
		case replyRunning, replyHandedOff:
			next := replySent
			if s == replyHandedOff {
				next = replyDone
			}
			if !r.state.CompareAndSwap(s, next) {
				continue
			}
			r.c.queueReply(r.req, resp)
			if s == replyHandedOff {
				r.c.endRequest()
			}
			return
		default:
			resp.written()
			return
		}
	}
}

// handOff is called by Conn.handle when the handler returned nil after
// Defer: it reports whether Send has yet to come (and will end the request).
func (r *Reply) handOff() bool {
	return r.state.CompareAndSwap(replyRunning, replyHandedOff)
}

// abandon is called by Conn.handle when the handler returned a response
// after Defer: a later Send is dropped.
func (r *Reply) abandon() { r.state.Store(replyDone) }

// queueReply queues a deferred response without waiting (see Reply.Send).
func (c *Conn) queueReply(req, resp *Command) {
	if req.IsOneway() {
		resp.written()
		return
	}
	resp.Opaque = req.Opaque
	resp.Flag |= FlagResponse
	resp.SerializeType = req.SerializeType
	f, err := c.prepare(resp)
	if err != nil {
		c.cfg.logger.Debug("remoting: deferred response not sent", "conn", c.id, "code", RequestCode(req.Code).String(), "err", err)
		return
	}
	c.budget.acquire(f.charged, sendReply, c.done)
	c.sendMu.RLock()
	if c.sendClosed {
		c.sendMu.RUnlock()
		c.drop(&f)
		return
	}
	c.replyMu.Lock()
	c.replies = append(c.replies, f)
	c.replyMu.Unlock()
	c.sendMu.RUnlock()
	select {
	case c.replyKick <- struct{}{}:
	default:
	}
}

// takeReplies moves queued deferred responses to batch, up to max frames
// in all; if some are left, the writer is kicked to come back for them.
func (c *Conn) takeReplies(batch []outFrame, max int) []outFrame {
	c.replyMu.Lock()
	defer c.replyMu.Unlock()
	n := min(len(c.replies), max-len(batch))
	if n <= 0 {
		return batch
	}
	batch = append(batch, c.replies[:n]...)
	rest := copy(c.replies, c.replies[n:])
	clear(c.replies[rest:])
	c.replies = c.replies[:rest]
	if rest > 0 {
		select {
		case c.replyKick <- struct{}{}:
		default:
		}
	}
	return batch
}

// dropReplies releases the deferred responses the writer will never
// write; sendClosed is set, so no more are queued.
func (c *Conn) dropReplies() {
	c.replyMu.Lock()
	left := c.replies
	c.replies = nil
	c.replyMu.Unlock()
	for i := range left {
		c.drop(&left[i])
	}
}
