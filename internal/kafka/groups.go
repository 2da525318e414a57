package kafka

// Consumer groups: the classic protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup) with this broker as the coordinator of every group, state
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
// cannot handle it there). Static membership (instance ids) is not
// implemented: an instance id is ignored. A JoinGroup or a non-leader's
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
	pending      map[string]bool // member ids handed out by MEMBER_ID_REQUIRED
	timer        *time.Timer
}

func newMemberID(clientID string) string {
	var b [8]byte
	rand.Read(b[:])
	return clientID + "-" + hex.EncodeToString(b[:])
}

func (s *Server) group(name string) *group {
	g := s.groups[name]
	if g == nil {
		g = &group{name: name, members: map[string]*member{}, pending: map[string]bool{}}
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
	g := s.group(req.Group)
	if len(g.members) > 0 && g.protocolType != req.ProtocolType || !g.supportsAny(req.Protocols) {
		s.gmu.Unlock()
		return fail(errInconsistentGroupProtocol)
	}
	id := req.MemberID
	if id == "" {
		id = newMemberID(clientID)
		if req.Version >= 4 {
			g.pending[id] = true
			s.gmu.Unlock()
			resp.MemberID = id
			return fail(errMemberIDRequired)
		}
	} else if g.members[id] == nil && !g.pending[id] {
		s.gmu.Unlock()
		resp.MemberID = id
		return fail(errUnknownMemberID)
	}
	delete(g.pending, id)
	m := g.members[id]
	if m == nil {
		m = &member{id: id}
		g.members[id] = m
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
	g.timer = time.AfterFunc(longest, func() {
		s.gmu.Lock()
		defer s.gmu.Unlock()
		if g.state == groupPreparing {
			s.completeJoin(g)
		}
	})
}

// maybeCompleteJoin completes the rebalance once every member joined.
func (s *Server) maybeCompleteJoin(g *group) {
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
	for id, m := range g.members {
		if m.joining == nil {
			delete(g.members, id)
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
	var all []kmsg.JoinGroupResponseMember
	for id, m := range g.members {
		for _, p := range m.protocols {
			if p.Name == g.protocol {
				all = append(all, kmsg.JoinGroupResponseMember{MemberID: id, ProtocolMetadata: p.Metadata})
			}
		}
	}
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
	ids := []string{req.MemberID}
	if req.Version >= 3 {
		ids = ids[:0]
		for _, m := range req.Members {
			ids = append(ids, m.MemberID)
		}
	}
	s.gmu.Lock()
	defer s.gmu.Unlock()
	g := s.groups[req.Group]
	for _, id := range ids {
		code := errNone
		if g == nil || g.members[id] == nil {
			code = errUnknownMemberID
		} else {
			s.removeMember(g, id)
		}
		if req.Version >= 3 {
			resp.Members = append(resp.Members, kmsg.LeaveGroupResponseMember{MemberID: id, ErrorCode: code})
		} else {
			resp.ErrorCode = code
		}
	}
	return resp
}

// removeMember drops a member and rebalances the rest. gmu is held.
func (s *Server) removeMember(g *group, id string) {
	m := g.members[id]
	delete(g.members, id)
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
