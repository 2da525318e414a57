package amqp

// Dead-letter copies bound for queues of other groups (deadletter.go,
// forward.go). A message whose dead-letter exchange routes it to a queue
// homed on another group is handed to the server's remote dead-letter
// goroutine, which publishes the copy to each such queue on its home
// (through the default exchange, mandatory, on a channel in confirm mode
// of a connection this door opens as Config.PeerAccount), stores the copy for
// the queues here, and only then settles the original. Until then the
// original stays in flight: not delivered, not expired again. A home
// that is down, unreachable or nacks the copy leaves it so, and the copy
// is tried again every deadLetterRetry (the other pending copies too, in
// order) until it is taken or the broker stops; a broker that stops
// first serves the original again at its next start, which dead-letters
// it again: a copy is stored at least once, a copy taken before the stop
// may be taken twice. A queue gone from its home (the copy returned), or
// a name no group holds, takes nothing, as a local dead-letter routing
// key naming no queue. What a reject's dead-lettering waits for
// (conn.deadLetterDone) is told after the first attempt, taken or not.

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
)

// peerLogin is the account the door logs in with to another group's door
// for what no client connection carries (dead-letter copies):
// Config.PeerAccount with its secret key in the rules in force (read at
// every copy, so that a reloaded plain_acl.yml applies to the next dial),
// under ACL, else guest.
func (s *Server) peerLogin() (user, pass string) {
	if s.cfg.Accounts != nil && s.cfg.PeerAccount != "" {
		if rules := s.cfg.Accounts(); rules != nil {
			if a := rules.Accounts[s.cfg.PeerAccount]; a != nil {
				return a.AccessKey, a.SecretKey()
			}
		}
	}
	return "guest", "guest"
}

// errNacked: a home nacked a dead-letter copy.
var errNacked = errors.New("amqp: the queue's home did not take the copy (nack)")

// remoteDL is the server's queue of dead-letter copies for other groups.
type remoteDL struct {
	mu      sync.Mutex
	items   []*dlItem
	kick    chan struct{}
	started bool

	// The goroutine's own.
	conns map[*vhost]*conn // a pseudo connection per vhost, for its upstreams
	chans map[string]*dlCh // by vhost + group
	// down are the groups a send failed to in this pass: the other
	// copies for them wait for the next pass (one slow failure, not one
	// per copy).
	down map[string]error
}

// dlItem is one message whose copy awaits other groups.
type dlItem struct {
	q      *queue
	o      int64
	reason string
	done   func()
	sent   map[string]bool // remote queues that took it
	local  bool            // the copy for the queues here is stored
}

// dlCh is a confirm-mode channel to one home.
type dlCh struct {
	uc       *upChan
	confirms chan bool
	mu       sync.Mutex
	returned bool
}

// add queues it (never blocks); the goroutine starts on first use.
func (r *remoteDL) add(s *Server, it *dlItem) {
	r.mu.Lock()
	r.items = append(r.items, it)
	if !r.started {
		r.started = true
		r.kick = make(chan struct{}, 1)
		s.wg.Add(1)
		go s.runRemoteDL()
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (s *Server) runRemoteDL() {
	defer s.wg.Done()
	r := &s.remoteDL
	defer func() {
		for _, c := range r.conns {
			c.closeUpstreams()
		}
	}()
	for {
		select {
		case <-s.stop:
			return
		case <-r.kick:
		}
		for {
			r.mu.Lock()
			items := r.items
			r.items = nil
			r.mu.Unlock()
			if len(items) == 0 {
				break
			}
			var again []*dlItem
			clear(r.down)
			for i, it := range items {
				select {
				case <-s.stop:
					return
				default:
				}
				if !s.remoteDLOne(it) {
					continue
				}
				if it.done != nil {
					it.done() // the first attempt failed: not waited for longer
					it.done = nil
				}
				again = append(again, items[i])
			}
			if len(again) == 0 {
				continue
			}
			r.mu.Lock()
			r.items = append(again, r.items...)
			r.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-time.After(deadLetterRetry):
			}
		}
	}
}

// remoteDLOne tries one item; true: try again later.
func (s *Server) remoteDLOne(it *dlItem) bool {
	q := it.q
	finish := func(dropped bool) {
		q.deadLettered(it.o, dropped)
		if it.done != nil {
			it.done()
		}
	}
	m, release, ok := q.read(it.o)
	if !ok {
		finish(true)
		return false
	}
	rec, qs, remote, props, err := q.deadLetterCopy(&m, it.reason)
	body := slices.Clone(m.body)
	release()
	if err != nil {
		s.log.Error("amqp: dead-lettering: cannot build the copy; the message is dropped", "queue", q.name, "offset", it.o, "err", err)
		finish(true)
		return false
	}
	taken := 0
	for _, name := range remote {
		if it.sent[name] {
			taken++
			continue
		}
		ok, err := s.sendDeadLetter(q.v, name, props, body)
		if err != nil {
			s.log.Warn("amqp: dead-letter copy for another group's queue not taken; the message stays and is tried again",
				"queue", q.name, "offset", it.o, "target", name, "err", err)
			return true
		}
		if it.sent == nil {
			it.sent = map[string]bool{}
		}
		it.sent[name] = true
		if ok {
			taken++
		}
	}
	if len(qs) > 0 && !it.local {
		res, phys := s.store.PutRecord(s.baseCtx, rec)
		if res.Status != store.PutOK {
			s.log.Error("amqp: dead-letter copy not stored; the message stays and is tried again", "queue", q.name, "offset", it.o,
				"status", res.Status, "err", res.Err)
			return true
		}
		if waitVisible(s.baseCtx, s.store, phys+1) != nil {
			return true // the store closed: the original stays unsettled
		}
		it.local = true
		for _, t := range qs {
			t.stats.published.Add(1)
			t.mu.Lock()
			t.dropOverflowLocked()
			t.mu.Unlock()
			t.pump()
		}
	}
	if taken == 0 && len(qs) == 0 {
		finish(true)
		return false
	}
	q.stats.deadLettered.Add(1)
	finish(false)
	return false
}

// sendDeadLetter publishes a copy to queue name of v on its home and
// waits for the home's confirm: ok false if no group holds the queue
// (or it went from its home); an error if that cannot be told or the
// home did not take it.
func (s *Server) sendDeadLetter(v *vhost, name string, props, body []byte) (bool, error) {
	r := &s.remoteDL
	if r.conns == nil {
		r.conns, r.chans = map[*vhost]*conn{}, map[string]*dlCh{}
	}
	c := r.conns[v]
	if c == nil {
		c = &conn{srv: s, vh: v, done: s.stop}
		r.conns[v] = c
	}
	// The account's secret as the rules in force say now, for the
	// connections dialled from here on: one opened with a secret since
	// rotated is closed by its home (revoke.go) and dialled again with
	// this one.
	c.user, c.secret = s.peerLogin()
	p, ok, err := c.lookupHome(name)
	if err != nil || !ok {
		return false, err
	}
	if err := r.down[p.Group]; err != nil {
		return false, err
	}
	ok, err = s.sendDeadLetterTo(c, v, p, name, props, body)
	if err != nil {
		if r.down == nil {
			r.down = map[string]error{}
		}
		r.down[p.Group] = err
	}
	return ok, err
}

// sendDeadLetterTo publishes the copy to queue name on p and waits for
// its confirm (sendDeadLetter).
func (s *Server) sendDeadLetterTo(c *conn, v *vhost, p Peer, name string, props, body []byte) (bool, error) {
	r := &s.remoteDL
	key := homeKey(v.name, p.Group)
	d := r.chans[key]
	if d != nil && (d.uc.failed() != nil || d.uc.u.peer != p) {
		d.uc.close()
		d = nil
	}
	if d == nil {
		u, err := c.upstream(p)
		if err != nil {
			return false, err
		}
		d = &dlCh{confirms: make(chan bool, 1)}
		uc, err := u.openChannel(func(uc *upChan) {
			uc.onConfirm = func(_ uint64, _, ack bool) {
				select {
				case d.confirms <- ack:
				default:
				}
			}
			uc.onReturn = func(*wire.BasicReturn, []byte, []byte) {
				d.mu.Lock()
				d.returned = true
				d.mu.Unlock()
			}
		})
		if err != nil {
			return false, err
		}
		d.uc = uc
		if _, err := uc.call(&wire.ConfirmSelect{}); err != nil {
			uc.close()
			return false, err
		}
		r.chans[key] = d
	}
	d.mu.Lock()
	d.returned = false
	d.mu.Unlock()
	if err := d.uc.publish(&wire.BasicPublish{RoutingKey: name, Mandatory: true}, props, body); err != nil {
		return false, err
	}
	t := time.NewTimer(confirmTimeout)
	defer t.Stop()
	select {
	case ack := <-d.confirms:
		if !ack {
			return false, errNacked
		}
	case <-d.uc.gone:
		return false, d.uc.failed()
	case <-s.stop:
		return false, errConnClosed
	case <-t.C:
		d.uc.u.nc.Close()
		return false, errUpstreamClosed
	}
	d.mu.Lock()
	returned := d.returned
	d.mu.Unlock()
	if returned {
		s.homes.forget(homeKey(v.name, name))
	}
	return !returned, nil
}
