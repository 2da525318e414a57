package amqp

// Where a queue lives (forward.go): the other groups' doors, asked of
// Config.Cluster and cached for peersTTL, and the homes found by asking
// them, cached until proven wrong ("nowhere" for negativeHomeTTL).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// Cache lifetimes of the home look-ups.
const (
	// peersTTL is how long the list of peers is used before it is asked
	// again.
	peersTTL = 5 * time.Second
	// negativeHomeTTL is how long "no group has this queue" is believed:
	// a queue declared on another group meanwhile is found at most this
	// late by a publish here.
	negativeHomeTTL = time.Second
	// maxHomeEntries bounds the cached look-ups per server; past it the
	// cache is emptied (it only saves round trips).
	maxHomeEntries = 1 << 16
)

// homes is the server's cache of queue homes.
type homes struct {
	mu      sync.Mutex
	peers   []Peer
	peersAt time.Time
	// seen are the groups Cluster ever named since the start: one missing
	// from its answer now (its master down) may hold any name.
	seen   map[string]bool
	byName map[string]homeEntry // vhost + "\x00" + queue
}

type homeEntry struct {
	group string // "": on no group
	until time.Time
}

func homeKey(vhost, queue string) string { return vhost + "\x00" + queue }

func (h *homes) get(key string, now time.Time) (homeEntry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.byName[key]
	if ok && e.group == "" && now.After(e.until) {
		delete(h.byName, key)
		return homeEntry{}, false
	}
	return e, ok
}

func (h *homes) put(key string, e homeEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byName == nil || len(h.byName) >= maxHomeEntries {
		h.byName = map[string]homeEntry{}
	}
	h.byName[key] = e
}

func (h *homes) forget(key string) {
	h.mu.Lock()
	delete(h.byName, key)
	h.mu.Unlock()
}

// clusterPeers returns the other groups' doors (cached for peersTTL)
// and the groups seen before that are missing from them now. When they
// cannot be asked, the last answer stands.
func (s *Server) clusterPeers() (peers []Peer, missing []string, err error) {
	h := &s.homes
	h.mu.Lock()
	known := h.peers != nil
	fresh := known && time.Since(h.peersAt) < peersTTL
	h.mu.Unlock()
	if !fresh {
		if err := s.refreshPeers(); err != nil {
			if !known {
				return nil, nil, err
			}
			s.log.Warn("amqp: cannot refresh the cluster's AMQP doors; the last list stands", "err", err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for g := range h.seen {
		if !slices.ContainsFunc(h.peers, func(p Peer) bool { return p.Group == g }) {
			missing = append(missing, g)
		}
	}
	slices.Sort(missing)
	return h.peers, missing, nil
}

// refreshPeers asks Config.Cluster for the peers; on an error the list
// is kept, and asked again after peersTTL.
func (s *Server) refreshPeers() error {
	ctx, cancel := context.WithTimeout(s.baseCtx, forwardTimeout)
	defer cancel()
	ps, err := s.cfg.Cluster.Peers(ctx)
	h := &s.homes
	h.mu.Lock()
	defer h.mu.Unlock()
	h.peersAt = time.Now()
	if err != nil {
		return err
	}
	if ps == nil {
		ps = []Peer{}
	}
	h.peers = ps
	if h.seen == nil {
		h.seen = map[string]bool{}
	}
	for _, p := range ps {
		h.seen[p.Group] = true
	}
	return nil
}

// errHomeUnknown: a group that might hold the queue did not answer.
var errHomeUnknown = errors.New("amqp: forward: home unknown")

// lookupHome finds the group holding queue name (found false: none
// does). An error means some group could not be asked: the queue may
// be there.
func (c *conn) lookupHome(name string) (Peer, bool, error) {
	key := homeKey(c.vh.name, name)
	peers, missing, err := c.srv.clusterPeers()
	if err != nil {
		return Peer{}, false, fmt.Errorf("%w: the cluster's members: %v", errHomeUnknown, err)
	}
	if e, ok := c.srv.homes.get(key, time.Now()); ok {
		if e.group == "" {
			return Peer{}, false, nil
		}
		// The group's door as registered now (its master may have moved).
		if i := slices.IndexFunc(peers, func(p Peer) bool { return p.Group == e.group }); i >= 0 {
			return peers[i], true, nil
		}
		return Peer{Group: e.group}, true, nil // not registered now: fails as down
	}
	var down []string
	for _, g := range missing {
		down = append(down, g+" (no master registered)")
	}
	for _, p := range peers {
		has, err := c.askHas(p, name)
		if err != nil {
			down = append(down, fmt.Sprintf("%s (%v)", p.Group, err))
			continue
		}
		if has {
			c.srv.homes.put(key, homeEntry{group: p.Group})
			return p, true, nil
		}
	}
	if len(down) > 0 {
		return Peer{}, false, fmt.Errorf("%w: broker group %s down or inaccessible", errHomeUnknown, strings.Join(down, ", "))
	}
	c.srv.homes.put(key, homeEntry{until: time.Now().Add(negativeHomeTTL)})
	return Peer{}, false, nil
}

// askHas asks p whether it holds queue name: a passive declare on a
// channel of its own.
func (c *conn) askHas(p Peer, name string) (bool, error) {
	u, err := c.upstream(p)
	if err != nil {
		return false, err
	}
	uc, err := u.openChannel(nil)
	if err != nil {
		return false, err
	}
	r, err := uc.call(&wire.QueueDeclare{Queue: name, Passive: true})
	var rc *remoteClose
	switch {
	case err == nil:
		uc.close()
		if _, ok := r.m.(*wire.QueueDeclareOk); !ok {
			return false, fmt.Errorf("answered %s to queue.declare", r.m.Name())
		}
		return true, nil
	case errors.As(err, &rc) && rc.code == wire.NotFound:
		return false, nil
	case errors.As(err, &rc) && rc.code == wire.ResourceLocked:
		return true, nil // another connection's exclusive queue there
	}
	return false, err
}
