package kafka

// Consumer groups: the classic protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup) on the group's coordinator (coordinator.go), state
// in memory (a restart makes members rejoin, as a coordinator change does
// in Kafka). A group moves
//
//	Empty -> PreparingRebalance -> CompletingRebalance -> Stable
//	           ^ join, leave, a session timeout                |
//	           +-----------------------------------------------+
//
// A rebalance completes when every member has (re)joined, or when the
// longest rebalance timeout passes (members that did not rejoin are
// dropped). The first protocol of the leader's list that every member
// supports is chosen. JoinGroup v4+ without a member id is answered
// MEMBER_ID_REQUIRED with one, as Kafka does (never below v4: kafka-go
// cannot handle it there).
//
// Static membership (KIP-345): a member that joins with an instance id
// keeps its place under it. Its first join gets a member id at once (no
// MEMBER_ID_REQUIRED); a join with the instance id and no member id (the
// same instance restarted) replaces the old member id, and in a Stable
// group whose chosen protocol it still supports it gets the current
// generation and, at SyncGroup, its assignment back: no rebalance. A
// request naming the instance id with another member id than the one it
// holds is answered FENCED_INSTANCE_ID. Static members leave only by
// LeaveGroup naming their instance id or by their session timeout.
//
// The first rebalance of an Empty group waits Config.InitialRebalanceDelay
// (group.initial.rebalance.delay.ms, 3 s in broker.conf), longer by that
// again while new members keep joining, up to the rebalance timeout, so
// that members starting together share the first generation instead of
// the first taking every partition. A JoinGroup or a non-leader's
// SyncGroup waits on its connection's goroutine until the rebalance
// decides (connections are served one request at a time anyway).

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka error codes of the group protocol.
const (
	errCoordinatorNotAvailable   int16 = 15
	errIllegalGeneration         int16 = 22
	errInconsistentGroupProtocol int16 = 23
	errUnknownMemberID           int16 = 25
	errInvalidSessionTimeout     int16 = 26
	errRebalanceInProgress       int16 = 27
	errInvalidGroupID            int16 = 24
	errMemberIDRequired          int16 = 79
	errFencedInstanceID          int16 = 82
)

// Session timeout bounds (Kafka's group.min/max.session.timeout.ms).
const (
	minSessionTimeout = 6 * time.Second
	maxSessionTimeout = 30 * time.Minute
)

type groupState int

const (
	groupEmpty groupState = iota
	groupPreparing
	groupCompleting
	groupStable
)

type joinResult struct {
	code int16
	resp kmsg.JoinGroupResponse // Generation, Protocol, LeaderID, Members
}

type syncResult struct {
	code       int16
	assignment []byte
}

type member struct {
	id             string
	instanceID     string // static membership; "" for a dynamic member
	clientID, host string
	protocols      []kmsg.JoinGroupRequestProtocol // metadata copied
	session, rebal time.Duration
	lastSeen       time.Time
	joining        chan joinResult // set while a JoinGroup waits
	syncing        chan syncResult // set while a SyncGroup waits
	assignment     []byte
}

type group struct {
	name         string
	state        groupState
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	pending      map[string]bool   // member ids handed out by MEMBER_ID_REQUIRED
	statics      map[string]string // instance id -> member id
	timer        *time.Timer
	// The first rebalance of an Empty group is delayed (initialJoin):
	// joined says a member was added since the delay started, delayLeft
	// what is left of the rebalance timeout for further delays.
	initialJoin bool
	joined      bool
	delayLeft   time.Duration
}

func newMemberID(clientID string) string {
	var b [8]byte
	rand.Read(b[:])
	return clientID + "-" + hex.EncodeToString(b[:])
}

func (s *Server) group(name string) *group {
	g := s.groups[name]
	if g == nil {
		g = &group{name: name, members: map[string]*member{}, pending: map[string]bool{}, statics: map[string]string{}}
		s.groups[name] = g
	}
	return g
}

func (s *Server) joinGroup(req *kmsg.JoinGroupRequest, clientID, host string) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation = -1
	fail := func(code int16) kmsg.Response { resp.ErrorCode = code; return resp }
	session := time.Duration(req.SessionTimeoutMillis) * time.Millisecond
	rebal := time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	if req.Version == 0 {
		rebal = session
	}
	switch {
	case req.Group == "":
		return fail(errInvalidGroupID)
	case session < minSessionTimeout || session > maxSessionTimeout:
		return fail(errInvalidSessionTimeout)
	}
	s.gmu.Lock()
	if s.consumerGroupBusy(req.Group) { // a KIP-848 group with members (group848.go)
		s.gmu.Unlock()
		return fail(errInconsistentGroupProtocol)
	}
	g := s.group(req.Group)
	if len(g.members) > 0 && g.protocolType != req.ProtocolType || !g.supportsAny(req.Protocols) {
		s.gmu.Unlock()
		return fail(errInconsistentGroupProtocol)
	}
	inst := deref(req.InstanceID)
	id := req.MemberID
	if inst != "" {
		if held, ok := g.statics[inst]; ok && id != "" && id != held {
			s.gmu.Unlock()
			resp.MemberID = id
			return fail(errFencedInstanceID)
		}
	}
	switch {
	case id == "" && inst != "" && g.statics[inst] != "":
		// The instance restarted: its member id is replaced.
		id = newMemberID(clientID)
		if r, ok := s.rejoinStatic(g, inst, id, req); ok {
			s.gmu.Unlock()
			r.SetVersion(req.Version)
			return r
		}
	case id == "":
		id = newMemberID(clientID)
		if req.Version >= 4 && inst == "" {
			g.pending[id] = true
			s.gmu.Unlock()
			resp.MemberID = id
			return fail(errMemberIDRequired)
		}
	case g.members[id] == nil && !g.pending[id]:
		s.gmu.Unlock()
		resp.MemberID = id
		return fail(errUnknownMemberID)
	}
	delete(g.pending, id)
	m := g.members[id]
	if m == nil {
		m = &member{id: id, instanceID: inst}
		g.members[id] = m
		g.joined = true
		if inst != "" {
			g.statics[inst] = id
		}
	}
	m.protocols = m.protocols[:0]
	for _, p := range req.Protocols {
		m.protocols = append(m.protocols, kmsg.JoinGroupRequestProtocol{Name: p.Name, Metadata: append([]byte(nil), p.Metadata...)})
	}
	m.session, m.rebal, m.lastSeen = session, rebal, time.Now()
	m.clientID, m.host = clientID, host
	g.protocolType = req.ProtocolType
	wait := make(chan joinResult, 1)
	if m.joining != nil {
		m.joining <- joinResult{code: errUnknownMemberID} // replaced by this join
	}
	m.joining = wait
	s.prepareRebalance(g)
	s.maybeCompleteJoin(g)
	s.gmu.Unlock()
	var r joinResult
	select {
	case r = <-wait:
	case <-s.ctx.Done():
		return fail(errCoordinatorNotAvailable)
	}
	*resp = r.resp
	resp.SetVersion(req.Version)
	resp.ErrorCode, resp.MemberID = r.code, id
	return resp
}

// rejoinStatic gives the member that holds instance id inst the new
// member id id (the instance restarted). In a Stable group whose chosen
// protocol it still offers, it answers at once with the current
// generation (ok): SyncGroup then hands back its assignment, and nothing
// rebalances. Otherwise the caller goes on with a join under id, which
// rebalances. gmu is held.
func (s *Server) rejoinStatic(g *group, inst, id string, req *kmsg.JoinGroupRequest) (*kmsg.JoinGroupResponse, bool) {
	old := g.statics[inst]
	m := g.members[old]
	if m == nil {
		delete(g.statics, inst)
		return nil, false
	}
	if m.joining != nil {
		m.joining <- joinResult{code: errFencedInstanceID}
		m.joining = nil
	}
	if m.syncing != nil {
		m.syncing <- syncResult{code: errFencedInstanceID}
		m.syncing = nil
	}
	delete(g.members, old)
	m.id = id
	g.members[id], g.statics[inst] = m, id
	if g.leader == old {
		g.leader = id
	}
	offers := false
	for _, p := range req.Protocols {
		offers = offers || p.Name == g.protocol
	}
	if g.state != groupStable || !offers || g.protocolType != req.ProtocolType {
		return nil, false
	}
	m.protocols = m.protocols[:0]
	for _, p := range req.Protocols {
		m.protocols = append(m.protocols, kmsg.JoinGroupRequestProtocol{Name: p.Name, Metadata: append([]byte(nil), p.Metadata...)})
	}
	m.lastSeen = time.Now()
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation, resp.LeaderID, resp.MemberID = g.generation, g.leader, id
	resp.Protocol, resp.ProtocolType = kmsg.StringPtr(g.protocol), kmsg.StringPtr(g.protocolType)
	if id == g.leader { // it need not assign again: the group keeps its assignment
		resp.Members, resp.SkipAssignment = g.memberList(), true
	}
	return resp, true
}

// memberList is the JoinGroup view of the members for the leader.
func (g *group) memberList() []kmsg.JoinGroupResponseMember {
	var all []kmsg.JoinGroupResponseMember
	for id, m := range g.members {
		for _, p := range m.protocols {
			if p.Name == g.protocol {
				all = append(all, kmsg.JoinGroupResponseMember{MemberID: id, InstanceID: instancePtr(m.instanceID), ProtocolMetadata: p.Metadata})
			}
		}
	}
	return all
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func instancePtr(inst string) *string {
	if inst == "" {
		return nil
	}
	return kmsg.StringPtr(inst)
}

// checkInstance fences a request that names instance id inst with a
// member id other than the one the instance holds. gmu is held.
func (s *Server) checkInstance(groupName string, inst *string, id string) int16 {
	g := s.groups[groupName]
	if g == nil || inst == nil || *inst == "" {
		return errNone
	}
	if held, ok := g.statics[*inst]; ok && held != id {
		return errFencedInstanceID
	}
	return errNone
}

// supportsAny reports whether the protocols fit what every member offers.
func (g *group) supportsAny(ps []kmsg.JoinGroupRequestProtocol) bool {
	if len(g.members) == 0 {
		return len(ps) > 0
	}
	for _, p := range ps {
		if g.allSupport(p.Name, "") {
			return true
		}
	}
	return false
}

// allSupport reports whether every member but skip offers protocol name.
func (g *group) allSupport(name, skip string) bool {
	for id, m := range g.members {
		if id == skip {
			continue
		}
		ok := false
		for _, p := range m.protocols {
			ok = ok || p.Name == name
		}
		if !ok {
			return false
		}
	}
	return true
}

// prepareRebalance starts a rebalance unless one is running. gmu is held.
func (s *Server) prepareRebalance(g *group) {
	if g.state == groupPreparing {
		return
	}
	first := g.state == groupEmpty
	g.state = groupPreparing
	var longest time.Duration
	for _, m := range g.members {
		if m.syncing != nil {
			m.syncing <- syncResult{code: errRebalanceInProgress}
			m.syncing = nil
		}
		longest = max(longest, m.rebal)
	}
	if g.timer != nil {
		g.timer.Stop()
	}
	if delay := s.cfg.InitialRebalanceDelay; first && delay > 0 {
		d := min(delay, longest)
		g.initialJoin, g.joined, g.delayLeft = true, false, longest-d
		g.timer = time.AfterFunc(d, func() { s.initialDelayPassed(g) })
		return
	}
	g.timer = time.AfterFunc(longest, func() {
		s.gmu.Lock()
		defer s.gmu.Unlock()
		if g.state == groupPreparing && !g.initialJoin {
			s.completeJoin(g)
		}
	})
}

// initialDelayPassed ends a delay of a group's first rebalance: another
// delay when members joined meanwhile and the rebalance timeout allows,
// else the rebalance completes with the members that joined.
func (s *Server) initialDelayPassed(g *group) {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	if g.state != groupPreparing || !g.initialJoin {
		return
	}
	if g.joined && g.delayLeft > 0 {
		d := min(s.cfg.InitialRebalanceDelay, g.delayLeft)
		g.joined, g.delayLeft = false, g.delayLeft-d
		g.timer = time.AfterFunc(d, func() { s.initialDelayPassed(g) })
		return
	}
	g.initialJoin = false
	s.completeJoin(g)
}

// maybeCompleteJoin completes the rebalance once every member joined
// (not during the first rebalance's delay).
func (s *Server) maybeCompleteJoin(g *group) {
	if g.initialJoin {
		return
	}
	for _, m := range g.members {
		if m.joining == nil {
			return
		}
	}
	s.completeJoin(g)
}

// completeJoin drops the members that did not rejoin, starts the next
// generation and answers every waiting JoinGroup. gmu is held.
func (s *Server) completeJoin(g *group) {
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	g.initialJoin = false
	for id, m := range g.members {
		if m.joining == nil {
			g.drop(id)
		}
	}
	if len(g.members) == 0 {
		g.state, g.leader, g.protocol = groupEmpty, "", ""
		return
	}
	if g.members[g.leader] == nil {
		g.leader = ""
		for id := range g.members {
			if g.leader == "" || id < g.leader {
				g.leader = id
			}
		}
	}
	g.protocol = ""
	for _, p := range g.members[g.leader].protocols {
		if g.allSupport(p.Name, "") {
			g.protocol = p.Name
			break
		}
	}
	g.generation++
	g.state = groupCompleting
	all := g.memberList()
	for id, m := range g.members {
		r := joinResult{}
		r.resp.Generation, r.resp.LeaderID = g.generation, g.leader
		r.resp.Protocol, r.resp.ProtocolType = kmsg.StringPtr(g.protocol), kmsg.StringPtr(g.protocolType)
		if g.protocol == "" {
			r.code = errInconsistentGroupProtocol
		}
		if id == g.leader {
			r.resp.Members = all
		}
		m.assignment, m.lastSeen = nil, time.Now()
		m.joining <- r
		m.joining = nil
	}
}

// member finds a member of a generation: an error code, or 0.
func (s *Server) checkMember(groupName, id string, gen int32) (*group, *member, int16) {
	g := s.groups[groupName]
	if g == nil || g.members[id] == nil {
		return g, nil, errUnknownMemberID
	}
	if gen != g.generation {
		return g, g.members[id], errIllegalGeneration
	}
	return g, g.members[id], errNone
}

func (s *Server) syncGroup(req *kmsg.SyncGroupRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	s.gmu.Lock()
	g, m, code := s.checkMember(req.Group, req.MemberID, req.Generation)
	if fenced := s.checkInstance(req.Group, req.InstanceID, req.MemberID); fenced != errNone {
		code = fenced
	}
	if code == errNone && g.state == groupPreparing {
		code = errRebalanceInProgress
	}
	if code != errNone {
		s.gmu.Unlock()
		resp.ErrorCode = code
		return resp
	}
	resp.Protocol, resp.ProtocolType = kmsg.StringPtr(g.protocol), kmsg.StringPtr(g.protocolType)
	m.lastSeen = time.Now()
	if g.state == groupStable {
		resp.MemberAssignment = m.assignment
		s.gmu.Unlock()
		return resp
	}
	if m.id == g.leader {
		for _, a := range req.GroupAssignment {
			if x := g.members[a.MemberID]; x != nil {
				x.assignment = append([]byte(nil), a.MemberAssignment...)
			}
		}
		g.state = groupStable
		for _, x := range g.members {
			if x.syncing != nil {
				x.syncing <- syncResult{assignment: x.assignment}
				x.syncing = nil
			}
		}
		resp.MemberAssignment = m.assignment
		s.gmu.Unlock()
		return resp
	}
	wait := make(chan syncResult, 1)
	m.syncing = wait
	s.gmu.Unlock()
	select {
	case r := <-wait:
		resp.ErrorCode, resp.MemberAssignment = r.code, r.assignment
	case <-s.ctx.Done():
		resp.ErrorCode = errCoordinatorNotAvailable
	}
	return resp
}

func (s *Server) heartbeat(req *kmsg.HeartbeatRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	s.gmu.Lock()
	defer s.gmu.Unlock()
	g, m, code := s.checkMember(req.Group, req.MemberID, req.Generation)
	if fenced := s.checkInstance(req.Group, req.InstanceID, req.MemberID); fenced != errNone {
		resp.ErrorCode = fenced
		return resp
	}
	if m != nil {
		m.lastSeen = time.Now()
	}
	if code == errNone && g.state == groupPreparing {
		code = errRebalanceInProgress
	}
	resp.ErrorCode = code
	return resp
}

func (s *Server) leaveGroup(req *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	leaving := []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	if req.Version >= 3 {
		leaving = req.Members
	}
	s.gmu.Lock()
	defer s.gmu.Unlock()
	g := s.groups[req.Group]
	for _, lm := range leaving {
		id, code := lm.MemberID, errNone
		if inst := deref(lm.InstanceID); inst != "" && g != nil {
			// A static member leaves by its instance id; the member id,
			// when given, must be the one the instance holds.
			held, ok := g.statics[inst]
			switch {
			case !ok:
				code = errUnknownMemberID
			case id != "" && id != held:
				code = errFencedInstanceID
			default:
				id = held
			}
		}
		if code == errNone && (g == nil || g.members[id] == nil) {
			code = errUnknownMemberID
		}
		if code == errNone {
			s.removeMember(g, id)
		}
		if req.Version >= 3 {
			resp.Members = append(resp.Members, kmsg.LeaveGroupResponseMember{MemberID: lm.MemberID, InstanceID: lm.InstanceID, ErrorCode: code})
		} else {
			resp.ErrorCode = code
		}
	}
	return resp
}

// removeMember drops a member and rebalances the rest. gmu is held.
func (s *Server) removeMember(g *group, id string) {
	m := g.members[id]
	g.drop(id)
	if m.joining != nil {
		m.joining <- joinResult{code: errUnknownMemberID}
	}
	if m.syncing != nil {
		m.syncing <- syncResult{code: errUnknownMemberID}
	}
	if len(g.members) == 0 {
		if g.timer != nil {
			g.timer.Stop()
			g.timer = nil
		}
		g.state, g.leader = groupEmpty, ""
		return
	}
	s.prepareRebalance(g)
	s.maybeCompleteJoin(g)
}

// drop deletes member id and the instance id it holds. gmu is held.
func (g *group) drop(id string) {
	if m := g.members[id]; m != nil && m.instanceID != "" && g.statics[m.instanceID] == id {
		delete(g.statics, m.instanceID)
	}
	delete(g.members, id)
}

// expireSessions drops members that sent nothing within their session
// timeout (not while their JoinGroup waits). It runs every second until
// the server closes.
func (s *Server) expireSessions() {
	defer s.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			s.gmu.Lock()
			s.expireConsumerGroups(now) // group848.go
			for _, g := range s.groups {
				for id, m := range g.members {
					if m.joining == nil && now.Sub(m.lastSeen) > m.session {
						s.log.Info("kafka: group member session expired", "group", g.name, "member", id)
						s.removeMember(g, id)
					}
				}
			}
			s.gmu.Unlock()
		}
	}
}
