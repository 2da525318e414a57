package amqp

// Who creates a new queue name in a cluster of groups (forward.go). A
// queue name has one home cluster-wide: before a member creates a queue
// no group has, it claims the name from the name's arbiter, one group
// chosen by rendezvous hashing of the vhost and name over every group
// the member knows (this one, the registered ones and those seen
// registered since the start). The arbiter decides alone, under one lock,
// from what it holds: a queue of that name of its own (it is the home),
// else the group it last named for the name within claimTTL, else the
// claimer. The member creates the queue only if the arbiter named it,
// else forwards the declare to the group named, which creates it there
// (after claiming it too) or answers for the queue it has; two members
// declaring one new name at the same moment thus end with one queue, and
// the loser's declare is answered as a redeclare (406 on other arguments).
//
// Why claimTTL suffices: a member creates a queue at most claimValid after
// the look-up (forward_home.go: "no group has it", an answer at most
// negativeHomeTTL old) that preceded its claim, and claims only after it;
// the arbiter keeps naming a group for claimTTL (> 2*claimValid) after it
// last did. A claim decided after that record lapsed comes after a
// look-up that began after the queue was created, which found it.
//
// The records are memory only. An arbiter that restarts refuses claims
// until claimTTL after the last answer it gave: claims.json in the door's
// directory holds a time no earlier than every answer given (written
// durably, claimMarkEvery ahead, before an answer it no longer covers),
// and the arbiter answers again claimTTL after it; an arbiter down or not registered fails the declare with an error
// naming it: no queue is created without an answer. A member that claims
// over its connection to the arbiter's door sends a passive queue.declare
// carrying claimArg (its group) and gets declare-ok naming the owner.

import (
	"errors"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/vfs"
)

const (
	// claimArg is the argument of a claim's passive queue.declare: the
	// claiming group.
	claimArg = "x-keel-claim"
	// claimOwnerPrefix starts the queue field of a claim's declare-ok,
	// followed by the owner's group.
	claimOwnerPrefix = "x-keel-owner:"
	// claimTTL is how long an arbiter keeps naming the group it named.
	claimTTL = 10 * time.Second
	// claimValid bounds the time from a member's look-up to the claim's
	// answer it creates the queue on.
	claimValid = 4 * time.Second
	// claimMarkEvery is how far ahead of an answer claims.json is
	// written (one write covers the answers of that long).
	claimMarkEvery = time.Second
	// maxClaims: past it the lapsed records are dropped.
	maxClaims  = 1 << 14
	claimsFile = "claims.json"
)

// claims is an arbiter's records.
type claims struct {
	mu     sync.Mutex
	byName map[string]claimRec // homeKey
	from   time.Time           // no answer before (a restart)
	mark   time.Time           // what claims.json holds: no answer after it
}

type claimRec struct {
	group string
	at    time.Time
}

type claimsMark struct {
	AnswersUntilMs int64 `json:"answersUntilMs"`
}

// openClaims reads claims.json: an arbiter that answered within claimTTL
// before it stopped answers again only once that time passed.
func (s *Server) openClaims() error {
	var mk claimsMark
	if err := readJSON(s.cfg.FS, filepath.Join(s.dir, claimsFile), &mk); err != nil {
		return err
	}
	if mk.AnswersUntilMs > 0 {
		s.claims.mark = time.UnixMilli(mk.AnswersUntilMs)
		s.claims.from = s.claims.mark.Add(claimTTL)
	}
	return nil
}

// arbiter returns the group that arbitrates name in vhost among groups.
func arbiter(vhost, name string, groups []string) string {
	var best string
	var bestH uint64
	for _, g := range groups {
		h := fnv.New64a()
		h.Write([]byte(vhost))
		h.Write([]byte{0})
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write([]byte(g))
		if v := h.Sum64(); best == "" || v > bestH || (v == bestH && g < best) {
			best, bestH = g, v
		}
	}
	return best
}

// answerClaim decides who creates queue name of v for claimer.
func (s *Server) answerClaim(v *vhost, name, claimer string) (string, error) {
	c := &s.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Before(c.from) {
		return "", fmt.Errorf("broker group %s, the arbiter of new queue names like this one, restarted: it decides again from %s",
			s.cfg.Group, c.from.UTC().Format(time.RFC3339))
	}
	if v.queue(name) != nil {
		return s.cfg.Group, nil
	}
	key := homeKey(v.name, name)
	r, ok := c.byName[key]
	if !ok || now.Sub(r.at) >= claimTTL {
		r.group = claimer
	}
	r.at = now
	if !now.Before(c.mark) { // claims.json must cover this answer
		b := fmt.Appendf(nil, `{"answersUntilMs":%d}`, now.Add(claimMarkEvery).UnixMilli())
		if err := vfs.WriteFileDurable(s.cfg.FS, filepath.Join(s.dir, claimsFile), b, 0o644); err != nil {
			return "", fmt.Errorf("broker group %s cannot record its answer: %v", s.cfg.Group, err)
		}
		c.mark = now.Add(claimMarkEvery)
	}
	if c.byName == nil {
		c.byName = map[string]claimRec{}
	}
	if len(c.byName) >= maxClaims {
		for k, old := range c.byName {
			if now.Sub(old.at) >= claimTTL {
				delete(c.byName, k)
			}
		}
	}
	c.byName[key] = r
	return r.group, nil
}

// claim asks the arbiter of name which group creates it.
func (c *conn) claim(name string) (string, error) {
	self := c.srv.cfg.Group
	peers, missing, err := c.srv.clusterPeers()
	if err != nil {
		return "", fmt.Errorf("the cluster's members: %v", err)
	}
	groups := append([]string{self}, missing...)
	for _, p := range peers {
		groups = append(groups, p.Group)
	}
	if len(groups) == 1 {
		return self, nil // no other group to agree with
	}
	arb := arbiter(c.vh.name, name, groups)
	if arb == self {
		return c.srv.answerClaim(c.vh, name, self)
	}
	var p Peer
	for _, q := range peers {
		if q.Group == arb {
			p = q
		}
	}
	if p.Group == "" {
		return "", fmt.Errorf("broker group %s, the arbiter of this name, has no master registered", arb)
	}
	u, err := c.upstream(p)
	if err != nil {
		return "", fmt.Errorf("the arbiter of this name (%s): %v", p, err)
	}
	uc, err := u.openChannel(nil)
	if err != nil {
		return "", fmt.Errorf("the arbiter of this name (%s): %v", p, err)
	}
	r, err := uc.call(&wire.QueueDeclare{Queue: name, Passive: true, Arguments: wire.Table{claimArg: self}})
	if err != nil {
		var rc *remoteClose
		if errors.As(err, &rc) {
			return "", fmt.Errorf("the arbiter of this name (broker group %s): %s", p.Group, strings.TrimPrefix(rc.text, codeNames[rc.code]+" - "))
		}
		return "", fmt.Errorf("the arbiter of this name (%s): %v", p, err)
	}
	uc.close()
	ok, isOk := r.m.(*wire.QueueDeclareOk)
	owner, named := "", false
	if isOk {
		owner, named = strings.CutPrefix(ok.Queue, claimOwnerPrefix)
	}
	if !named || owner == "" {
		return "", fmt.Errorf("the arbiter of this name (broker group %s) does not arbitrate names (it answered %s)", p.Group, r.m.Name())
	}
	return owner, nil
}

// answerClaimMethod answers a claim sent by another member (a passive
// declare carrying claimArg).
func (ch *channel) answerClaimMethod(m *wire.QueueDeclare, claimer any) error {
	g := tableString(claimer)
	if g == "" || ch.c.srv.cfg.Group == "" {
		return soft(wire.PreconditionFailed, m, "invalid arg '%s'", claimArg)
	}
	owner, err := ch.c.srv.answerClaim(ch.c.vh, m.Queue, g)
	if err != nil {
		return soft(wire.NotFound, m, "%v", err)
	}
	return ch.c.send(ch.id, &wire.QueueDeclareOk{Queue: claimOwnerPrefix + owner})
}

// claimDeclare claims the name of a queue m would create here (done
// false: create it here). Another owner gets the declare forwarded (a
// client's connection) or refused (another member's: it does not
// forward). Reader only.
func (ch *channel) claimDeclare(m *wire.QueueDeclare) (bool, error) {
	c := ch.c
	name := m.Queue
	start := ch.lookupAt
	ch.lookupAt = time.Time{}
	if c.srv.cfg.Cluster == nil || m.Passive || m.Exclusive || name == "" || strings.HasPrefix(name, "amq.") || c.vh.queue(name) != nil {
		return false, nil
	}
	if c.fromPeer || start.IsZero() {
		start = time.Now().Add(-negativeHomeTTL) // a cached answer is at most that old
		p, ok, err := c.lookupHome(name)
		if err != nil {
			return true, soft(wire.NotFound, m, "cannot tell where queue '%s' in vhost '%s' lives: %v", name, c.vh.name, err)
		}
		if ok {
			return true, soft(wire.NotFound, m, "queue '%s' in vhost '%s' is stored by broker group %s", name, c.vh.name, p.Group)
		}
	}
	owner, err := c.claim(name)
	if err != nil {
		return true, soft(wire.NotFound, m, "cannot declare queue '%s' in vhost '%s': %v", name, c.vh.name, err)
	}
	if owner == c.srv.cfg.Group {
		if time.Since(start) > claimValid {
			return true, soft(wire.NotFound, m, "cannot declare queue '%s' in vhost '%s': the cluster took longer than %v to answer; declare it again", name, c.vh.name, claimValid)
		}
		return false, nil
	}
	if c.fromPeer {
		return true, soft(wire.NotFound, m, "queue '%s' in vhost '%s' belongs to broker group %s", name, c.vh.name, owner)
	}
	peers, _, err := c.srv.clusterPeers()
	if err != nil {
		return true, soft(wire.NotFound, m, "cannot declare queue '%s' in vhost '%s': the cluster's members: %v", name, c.vh.name, err)
	}
	p := Peer{Group: owner}
	for _, q := range peers {
		if q.Group == owner {
			p = q
		}
	}
	return true, ch.forwardDeclareTo(m, p, name)
}
