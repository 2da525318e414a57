package broker

// The single-message sends of one read burst (remoting.BurstRunner): a
// producer with many sends in flight has a connection's reader find
// dozens of them buffered at once. Each is checked, de-duplicated and
// routed by itself as under Handle; those to be stored are put with one
// store call (store.PutEachDeferred: one CommitLog write for all, each
// send all or none by itself and answered from its own result, under
// SYNC_FLUSH after the group commit covering it). Sends of a burst are
// stored in the order they came. A send whose de-duplication would wait
// for another send of its key first has the burst so far stored
// (core.BeforeWait): that other send may be in it.

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// HandleBurst implements remoting.BurstRunner (see RunsInline: a burst
// holds single-message sends only).
func (h brokerHandler) HandleBurst(ctx context.Context, c *remoting.Conn, reqs, resps []*remoting.Command) {
	h.b.handleBurst(ctx, c, reqs, resps)
}

func (b *Broker) handleBurst(ctx context.Context, c *remoting.Conn, reqs, resps []*remoting.Command) {
	if len(reqs) == 1 || c == nil || !b.st.SyncFlush() {
		for i, req := range reqs {
			resps[i] = b.handle(ctx, c, req)
		}
		return
	}
	sb := sendBurstPool.Get().(*sendBurst)
	sb.ctx = ctx
	bctx := core.WithBeforeWait(ctx, sb.flush)
	for i, req := range reqs {
		resps[i] = b.handleInBurst(bctx, c, req, sb)
	}
	sb.flush()
	sb.release()
}

// handleInBurst is handle for a send of sb.
func (b *Broker) handleInBurst(ctx context.Context, c *remoting.Conn, req *remoting.Command, sb *sendBurst) *remoting.Command {
	if req.Code != remoting.ReqSendMessage && req.Code != remoting.ReqSendMessageV2 {
		return b.handle(ctx, c, req)
	}
	resp, err := b.call(ctx, func(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
		return b.handleSendIn(ctx, c, req, sb)
	}, c, req)
	if err != nil {
		resp = b.errorResponse(req, err)
	}
	return b.reply(req, resp)
}

// sendBurst holds a burst's sends waiting to be stored: per put, the
// send, the maker of its response and the reply it is sent through.
type sendBurst struct {
	ctx   context.Context
	puts  []store.DeferredPut
	sends []burstSend
}

type burstSend struct {
	sc      *sendCall
	respond func(store.PutResult) *remoting.Command
	reply   *remoting.Reply
}

var sendBurstPool = sync.Pool{New: func() any { return new(sendBurst) }}

// add queues a send's messages; its response goes through reply.
func (sb *sendBurst) add(sc *sendCall, ms []*message.Message, respond func(store.PutResult) *remoting.Command, reply *remoting.Reply) {
	sb.sends = append(sb.sends, burstSend{sc, respond, reply})
	sb.puts = append(sb.puts, store.DeferredPut{Msgs: ms, Done: func(res store.PutResult) { sc.answer(reply, respond, res) }})
}

// flush stores the queued sends and answers those whose result is known
// at once (the others are answered by the store's acknowledger).
func (sb *sendBurst) flush() {
	if len(sb.puts) == 0 {
		return
	}
	b := sb.sends[0].sc.b
	defer func() {
		if r := recover(); r != nil {
			b.log.Error("send burst panic", "sends", len(sb.sends), "panic", r, "stack", string(debug.Stack()))
			for i, s := range sb.sends {
				if !sb.puts[i].Pending {
					s.sc.answer(s.reply, s.respond, store.PutResult{Status: store.PutUnknownError, Err: fmt.Errorf("broker: internal error storing the send: %v", r)})
				}
			}
			sb.reset()
		}
	}()
	b.st.PutEachDeferred(sb.ctx, sb.puts)
	for i, s := range sb.sends {
		if !sb.puts[i].Pending {
			s.sc.answer(s.reply, s.respond, sb.puts[i].Result)
		}
	}
	sb.reset()
}

func (sb *sendBurst) reset() {
	clear(sb.puts)
	clear(sb.sends)
	sb.puts, sb.sends = sb.puts[:0], sb.sends[:0]
}

// release pools sb (flushed).
func (sb *sendBurst) release() {
	sb.ctx = nil
	sendBurstPool.Put(sb)
}
