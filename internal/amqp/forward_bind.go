package amqp

// Bindings to queues homed on other groups (forward.go). Exchanges and
// their bindings belong to the member where they were declared: a
// queue.bind through this door of a queue another group stores binds it
// to this door's exchange (durable with a durable exchange, in
// exchanges.json with the queue's home group), and a publish through
// this door routes by this door's bindings, forwarding a copy to each
// such queue's home (forward_publish.go).

import (
	"slices"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store/record"
)

// forwardBind handles queue.bind and queue.unbind of a queue homed on
// another group (done false: the queue is here, or nowhere).
func (ch *channel) forwardBind(m wire.Method, exch, queue, key string, args wire.Table, unbind, noWait bool) (bool, error) {
	if queue == "" {
		queue = ch.lastQueue
	}
	if unbind && ch.c.vh.hasRemoteBinding(exch, queue) {
		// An unbind needs no look-up: the binding says where the queue was.
		if err := ch.c.vh.bindRemote(m, exch, queue, "", key, args, true); err != nil {
			return true, err
		}
		return true, ch.c.send(ch.id, &wire.QueueUnbindOk{})
	}
	p, ok, err := ch.remoteHome(m, queue)
	if !ok || err != nil {
		return ok, err
	}
	if err := ch.c.vh.bindRemote(m, exch, queue, p.Group, key, args, unbind); err != nil {
		return true, err
	}
	if unbind {
		return true, ch.c.send(ch.id, &wire.QueueUnbindOk{})
	}
	if noWait {
		return true, nil
	}
	return true, ch.c.send(ch.id, &wire.QueueBindOk{})
}

// hasRemoteBinding reports whether exch has a binding to queue homed on
// another group.
func (v *vhost) hasRemoteBinding(exch, queue string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.exchanges[exch]
	return e != nil && slices.ContainsFunc(e.bindings, func(b binding) bool { return b.Queue == queue && b.Home != "" })
}

// bindRemote adds (or with unbind removes) a binding from exch to queue,
// stored by group home; as bind for a local queue.
func (v *vhost) bindRemote(m wire.Method, exch, queue, home, key string, args wire.Table, unbind bool) error {
	if exch == "" {
		return soft(wire.AccessRefused, m, "operation not permitted on the default exchange")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.exchanges[exch]
	if e == nil {
		return soft(wire.NotFound, m, "no exchange '%s' in vhost '%s'", exch, v.name)
	}
	if e.kind == kindHeaders {
		if xm, ok := args["x-match"]; ok {
			switch tableString(xm) {
			case "all", "any", "all-with-x", "any-with-x":
			default:
				return soft(wire.PreconditionFailed, m, "invalid x-match field value %q; expected all, any, all-with-x, or any-with-x", tableString(xm))
			}
		}
	}
	b := newBinding(queue, "", key, args)
	i := slices.IndexFunc(e.bindings, func(o binding) bool { return o.same(b) && o.Home != "" })
	switch {
	case unbind && i >= 0:
		e.bindings = slices.Delete(e.bindings, i, i+1)
		v.autoDeleteLocked()
	case !unbind && i < 0:
		if len(e.bindings) >= record.MaxDests {
			return soft(wire.PreconditionFailed, m, "exchange '%s' has the maximum of %d bindings", exch, record.MaxDests)
		}
		b.Home = home
		e.bindings = append(e.bindings, b)
		e.hadBinding = true
		v.remoteBound.Store(true)
	default:
		return nil
	}
	if e.durable {
		if err := v.saveExchangesLocked(); err != nil {
			return hard(wire.InternalError, m, "cannot write the bindings: %v", err)
		}
	}
	return nil
}
