package kafka

// Consumer groups of the next protocol (KIP-848): ConsumerGroupHeartbeat
// (key 68). The coordinator assigns partitions itself (group848_assign.go)
// and every member reconciles towards its target by heartbeats:
//
//   - The group epoch grows whenever the membership, a subscription, the
//     assignor or a subscribed topic's partition count changes; each
//     change computes a new target assignment at that epoch at once (so
//     the group is never seen Assigning).
//   - A member at an older epoch first revokes what its target no longer
//     holds: its heartbeat answer lists only the partitions it keeps, its
//     epoch unchanged, and the revoked ones stay its own until a heartbeat
//     reports owned partitions without them (or its rebalance timeout
//     passes: it is removed). Then it moves to the target epoch and gets
//     the target partitions no other member owns; the others (unreleased)
//     come at later heartbeats, once released. A partition is owned by at
//     most one member at any time (cgroup.owners).
//   - A heartbeat with an epoch above the member's, or below it other than
//     its previous epoch with owned partitions it holds (a lost answer),
//     is FENCED_MEMBER_EPOCH; an unknown member id UNKNOWN_MEMBER_ID.
//   - Epoch 0 joins (a member id the group knows rejoins in place and gets
//     its assignment again); -1 leaves; -2 is a static member's temporary
//     leave (the member id names it; Kafka also wants the instance id,
//     which franz-go leaves out): it keeps its partitions until its
//     session times out, and a
//     join with its instance id and a new member id takes its place (while
//     the holder has not left: UNRELEASED_INSTANCE_ID).
//
// A member that sends nothing for the session timeout (Kafka's
// group.consumer.session.timeout.ms, 45 s by default) is removed; the
// heartbeat interval told to members is 5 s by default
// (Config.ConsumerGroupSessionTimeout, ConsumerGroupHeartbeatInterval). A group id is either a classic group or
// a consumer group while it has members: a heartbeat for a classic group
// with members is GROUP_ID_NOT_FOUND, a JoinGroup for a consumer group
// with members INCONSISTENT_GROUP_PROTOCOL; an empty group of either kind
// becomes the other. State is in memory under Server.gmu, like the classic
// groups': a restart makes members rejoin (their heartbeats get
// UNKNOWN_MEMBER_ID). Committed offsets are the broker's, shared with
// classic and RocketMQ groups of the same name (group848_offsets.go).

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	errGroupMaxSizeReached  int16 = 81
	errFencedMemberEpoch    int16 = 110
	errUnreleasedInstanceID int16 = 111
	errUnsupportedAssignor  int16 = 112
	errStaleMemberEpoch     int16 = 113
	errInvalidRegex         int16 = 128
)

// Limits and timings of consumer groups.
const (
	cgDefaultSession   = 45 * time.Second // group.consumer.session.timeout.ms
	cgDefaultHeartbeat = 5 * time.Second  // group.consumer.heartbeat.interval.ms
	// maxConsumerGroupMembers bounds a group (GROUP_MAX_SIZE_REACHED).
	maxConsumerGroupMembers = 1000
	// maxSubscriptionRegexBytes bounds a subscribed regex,
	// maxSubscribedTopicNames a member's list of names (what a group
	// keeps and looks up at each heartbeat follows them).
	maxSubscriptionRegexBytes = 4096
	maxSubscribedTopicNames   = 10000
	// regexRefreshInterval: a group's regexes are matched against the
	// topics at most this often (and whenever a subscription changes).
	regexRefreshInterval = time.Second
)

// cgState is the door's consumer groups (under Server.gmu); the zero value
// is ready, with the default timings (Config's, when set).
type cgState struct {
	groups    map[string]*cgroup
	session   time.Duration // 0: cgDefaultSession
	heartbeat time.Duration // 0: cgDefaultHeartbeat
}

func (c *cgState) sessionTimeout() time.Duration {
	if c.session > 0 {
		return c.session
	}
	return cgDefaultSession
}

func (c *cgState) heartbeatInterval() time.Duration {
	if c.heartbeat > 0 {
		return c.heartbeat
	}
	return cgDefaultHeartbeat
}

type cgMember struct {
	id, instanceID, rackID string
	clientID, host         string
	epoch, prevEpoch       int32
	rebalance              time.Duration
	assignor               string
	topics                 []string // subscribed names, sorted
	regex                  string   // subscribed regex ("" none)
	deadline               time.Time
	// assigned holds the partitions it owns and was told of, each with
	// the member epoch at which it got it; revoking those it must give
	// back (still its own) by revokeBy.
	assigned map[tpKey]int32
	revoking map[tpKey]int32
	revokeBy time.Time
}

type cgroup struct {
	name        string
	epoch       int32 // the group epoch
	targetEpoch int32
	target      map[string]map[tpKey]bool // member id -> target partitions
	members     map[string]*cgMember
	statics     map[string]string // instance id -> member id
	owners      map[tpKey]string  // partition -> the member owning it
	parts       map[string]int32  // subscribed topic -> partitions, as last seen
	assignor    string            // of the current target
	regexes     map[string][]string
	regexAt     time.Time
}

// topicView answers partition counts and topic names for one heartbeat
// (read before gmu is taken: the cluster view may be refreshed).
type topicView struct {
	s  *Server
	cs *clusterState
}

func (v topicView) partitions(name string) int32 {
	tc, here := v.s.core.Topic(name)
	var n int32
	for _, tg := range v.cs.layout(name, tc, here) {
		n += tg.Queues
	}
	return n
}

func (v topicView) names() []string {
	set := map[string]bool{}
	for _, tc := range v.s.core.Topics() {
		if message.KindOfTopic(tc.TopicName) == message.TopicNormal {
			set[tc.TopicName] = true
		}
	}
	for name := range v.cs.topics {
		if message.KindOfTopic(name) == message.TopicNormal {
			set[name] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// validateCGHeartbeat checks a request as Kafka does before any state.
func validateCGHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest) (int16, string) {
	switch {
	case req.Group == "":
		return errInvalidRequest, "GroupId can't be empty."
	case req.MemberID == "" && (req.Version >= 1 || req.MemberEpoch != 0):
		// v0 joins without one and gets it from the coordinator.
		return errInvalidRequest, "MemberId can't be empty."
	case req.MemberEpoch < -2:
		return errInvalidRequest, "MemberEpoch is invalid."
	case req.RackID != nil && *req.RackID == "":
		return errInvalidRequest, "RackId can't be empty."
	case req.InstanceID != nil && *req.InstanceID == "":
		return errInvalidRequest, "InstanceId can't be empty."
	case len(req.SubscribedTopicNames) > maxSubscribedTopicNames:
		return errInvalidRequest, fmt.Sprintf("SubscribedTopicNames lists more than %d topics.", maxSubscribedTopicNames)
	}
	if req.MemberEpoch == 0 {
		switch {
		case req.RebalanceTimeoutMillis < 0:
			return errInvalidRequest, "RebalanceTimeoutMs must be provided in first request."
		case req.Topics == nil || len(req.Topics) > 0:
			return errInvalidRequest, "TopicPartitions must be empty when (re-)joining."
		case req.SubscribedTopicNames == nil && req.SubscribedTopicRegex == nil:
			return errInvalidRequest, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
		}
	}
	if a := req.ServerAssignor; a != nil && !knownAssignor(*a) {
		return errUnsupportedAssignor, fmt.Sprintf("ServerAssignor %s is not supported. Supported assignors: uniform, range.", *a)
	}
	if re := req.SubscribedTopicRegex; re != nil && *re != "" {
		if len(*re) > maxSubscriptionRegexBytes {
			return errInvalidRegex, fmt.Sprintf("SubscribedTopicRegex is longer than %d bytes.", maxSubscriptionRegexBytes)
		}
		if _, err := compileSubscription(*re); err != nil {
			return errInvalidRegex, "SubscribedTopicRegex is not a valid regular expression: " + err.Error()
		}
	}
	return errNone, ""
}

// newConsumerMemberID makes a member id for a v0 join, as a v1 client
// makes its own: 16 random bytes, base64url.
func newConsumerMemberID() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.URLEncoding.EncodeToString(b[:])
}

// compileSubscription compiles a subscribed regex, matched against whole
// topic names as Kafka does.
func compileSubscription(re string) (*regexp.Regexp, error) {
	return regexp.Compile("^(?:" + re + ")$")
}

func (s *Server) consumerGroupHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest, clientID, host string) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	fail := func(code int16, msg string) kmsg.Response {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = kmsg.StringPtr(msg)
		}
		return resp
	}
	if code, msg := validateCGHeartbeat(req); code != errNone {
		return fail(code, msg)
	}
	if req.MemberID == "" {
		req.MemberID = newConsumerMemberID()
	}
	view := topicView{s: s, cs: s.cluster(false)}
	now := time.Now()
	s.gmu.Lock()
	defer s.gmu.Unlock()
	if req.MemberEpoch < 0 {
		return s.cgLeave(req, resp, now)
	}
	if cg := s.groups[req.Group]; cg != nil && len(cg.members) > 0 {
		return fail(errGroupIDUnknown, fmt.Sprintf("Group %s is not a consumer group.", req.Group))
	}
	g := s.cg.groups[req.Group]
	var m *cgMember
	var code int16
	var msg string
	added := false
	if req.MemberEpoch == 0 {
		g, m, added, code, msg = s.cgJoin(req)
	} else {
		m, code, msg = g.checkEpoch(req)
	}
	if code != errNone {
		return fail(code, msg)
	}
	delete(s.groups, req.Group) // an empty classic group became this one
	m.clientID, m.host = clientID, host
	m.deadline = now.Add(s.cg.sessionTimeout())
	changed := g.updateSubscription(m, req) || added
	g.refresh(view, now, changed)
	owned := g.ownedOf(m, req.Topics) // at a join: empty
	sent := g.reconcile(m, owned, now)
	resp.MemberID, resp.MemberEpoch = kmsg.StringPtr(m.id), m.epoch
	resp.HeartbeatIntervalMillis = int32(s.cg.heartbeatInterval().Milliseconds())
	if sent || req.Topics != nil || req.MemberEpoch == 0 {
		resp.Assignment = m.assignmentMsg()
	}
	return resp
}

// cgJoin admits the member of a heartbeat with epoch 0: a new member, one
// the group knows (it rejoins in place), or a static member taking over
// its instance id from a holder that left with -2. gmu is held.
func (s *Server) cgJoin(req *kmsg.ConsumerGroupHeartbeatRequest) (g *cgroup, m *cgMember, added bool, code int16, msg string) {
	g = s.cg.groups[req.Group]
	if g == nil {
		if s.cg.groups == nil {
			s.cg.groups = map[string]*cgroup{}
		}
		g = &cgroup{name: req.Group, members: map[string]*cgMember{}, statics: map[string]string{},
			owners: map[tpKey]string{}, target: map[string]map[tpKey]bool{}, parts: map[string]int32{}}
		s.cg.groups[req.Group] = g
	}
	inst := deref(req.InstanceID)
	if m = g.members[req.MemberID]; m != nil {
		if inst != "" && m.instanceID != inst {
			return g, nil, false, errFencedInstanceID, "The member id is held by another instance id."
		}
		if m.epoch == -2 {
			m.epoch = m.prevEpoch
		}
		return g, m, false, errNone, ""
	}
	if inst != "" {
		if held, ok := g.statics[inst]; ok {
			old := g.members[held]
			if old.epoch != -2 {
				return g, nil, false, errUnreleasedInstanceID, fmt.Sprintf("Static member %s with instance id %s is still in the group.", held, inst)
			}
			return g, g.replaceStatic(old, req.MemberID), false, errNone, ""
		}
	}
	if len(g.members) >= maxConsumerGroupMembers {
		return g, nil, false, errGroupMaxSizeReached, fmt.Sprintf("The consumer group has reached its maximum of %d members.", maxConsumerGroupMembers)
	}
	m = &cgMember{id: req.MemberID, instanceID: inst, prevEpoch: -1, assignor: assignorUniform,
		assigned: map[tpKey]int32{}, revoking: map[tpKey]int32{}}
	g.members[m.id] = m
	if inst != "" {
		g.statics[inst] = m.id
	}
	g.target[m.id] = map[tpKey]bool{}
	return g, m, true, errNone, ""
}

// replaceStatic gives the place of old (a static member that left with
// -2) to the member id id: its epoch, partitions and target. gmu is held.
func (g *cgroup) replaceStatic(old *cgMember, id string) *cgMember {
	delete(g.members, old.id)
	m := old
	oldID := old.id
	m.id = id
	m.epoch = m.prevEpoch
	g.members[id] = m
	g.statics[m.instanceID] = id
	g.target[id] = g.target[oldID]
	delete(g.target, oldID)
	for k, owner := range g.owners {
		if owner == oldID {
			g.owners[k] = id
		}
	}
	return m
}

// checkEpoch finds the member of a heartbeat with an epoch above 0 and
// fences a wrong epoch. gmu is held.
func (g *cgroup) checkEpoch(req *kmsg.ConsumerGroupHeartbeatRequest) (*cgMember, int16, string) {
	var m *cgMember
	if g != nil {
		m = g.members[req.MemberID]
	}
	if m == nil {
		return nil, errUnknownMemberID, fmt.Sprintf("Member %s is not a member of group %s.", req.MemberID, req.Group)
	}
	if inst := deref(req.InstanceID); inst != "" && inst != m.instanceID {
		return nil, errFencedInstanceID, "The member id is held by another instance id."
	}
	switch {
	case req.MemberEpoch > m.epoch:
		return nil, errFencedMemberEpoch, fmt.Sprintf("The consumer group member has a greater member epoch (%d) than the one known by the group coordinator (%d).", req.MemberEpoch, m.epoch)
	case req.MemberEpoch < m.epoch:
		// The answer that bumped the epoch may have been lost: the
		// previous epoch passes with partitions the member holds.
		if req.MemberEpoch != m.prevEpoch || req.Topics == nil || !m.holds(g.ownedOf(m, req.Topics)) {
			return nil, errFencedMemberEpoch, fmt.Sprintf("The consumer group member has a smaller member epoch (%d) than the one known by the group coordinator (%d).", req.MemberEpoch, m.epoch)
		}
	}
	return m, errNone, ""
}

// holds reports whether every partition of owned is assigned to m.
func (m *cgMember) holds(owned map[tpKey]bool) bool {
	for k := range owned {
		if _, ok := m.assigned[k]; !ok {
			return false
		}
	}
	return true
}

// ownedOf maps the owned partitions of m's heartbeat (nil: unchanged) to
// partitions of the group's topics and m's; topic ids it does not know
// are left out.
func (g *cgroup) ownedOf(m *cgMember, topics []kmsg.ConsumerGroupHeartbeatRequestTopic) map[tpKey]bool {
	if topics == nil {
		return nil
	}
	names := make(map[[16]byte]string, len(g.parts))
	for name := range g.parts {
		names[topicID(name)] = name
	}
	for _, set := range []map[tpKey]int32{m.assigned, m.revoking} {
		for k := range set {
			names[topicID(k.topic)] = k.topic
		}
	}
	out := map[tpKey]bool{}
	for _, t := range topics {
		name, ok := names[t.TopicID]
		if !ok {
			continue
		}
		for _, p := range t.Partitions {
			out[tpKey{name, p}] = true
		}
	}
	return out
}

// updateSubscription applies the heartbeat's non-null fields to m and
// reports whether its subscription or assignor changed.
func (g *cgroup) updateSubscription(m *cgMember, req *kmsg.ConsumerGroupHeartbeatRequest) bool {
	changed := false
	if req.RebalanceTimeoutMillis >= 0 {
		m.rebalance = time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	}
	if req.RackID != nil {
		m.rackID = *req.RackID
	}
	if req.ServerAssignor != nil && *req.ServerAssignor != m.assignor {
		m.assignor, changed = *req.ServerAssignor, true
	}
	if req.SubscribedTopicNames != nil {
		names := slices.Clone(req.SubscribedTopicNames)
		slices.Sort(names)
		names = slices.Compact(names)
		if !slices.Equal(names, m.topics) {
			m.topics, changed = names, true
		}
	}
	if req.SubscribedTopicRegex != nil && *req.SubscribedTopicRegex != m.regex {
		m.regex, changed = *req.SubscribedTopicRegex, true
	}
	return changed
}

// subscribed is m's subscription: its names and its regex's matches.
func (g *cgroup) subscribed(m *cgMember) []string {
	if m.regex == "" {
		return m.topics
	}
	return append(slices.Clone(m.topics), g.regexes[m.regex]...)
}

// refresh matches the regexes again (when changed or due), reads the
// subscribed topics' partition counts, and bumps the group epoch when the
// subscriptions or the counts changed. The subscribed topics are listed
// again only on a change: a plain heartbeat reads the counts of the
// topics of g.parts. gmu is held.
func (g *cgroup) refresh(view topicView, now time.Time, changed bool) {
	if g.hasRegex() && (changed || now.Sub(g.regexAt) >= regexRefreshInterval) {
		changed = g.matchRegexes(view.names()) || changed
		g.regexAt = now
	}
	topics := slices.Collect(maps.Keys(g.parts))
	if changed {
		topics = g.subscribedTopics()
	}
	parts := make(map[string]int32, len(topics))
	for _, t := range topics {
		parts[t] = view.partitions(t)
	}
	if changed || !maps.Equal(parts, g.parts) {
		g.parts = parts
		g.bump()
	}
}

// matchRegexes matches the members' regexes against all topic names and
// reports whether a match changed. gmu is held.
func (g *cgroup) matchRegexes(all []string) bool {
	old := g.regexes
	g.regexes = map[string][]string{}
	changed := false
	for _, m := range g.members {
		if m.regex == "" || g.regexes[m.regex] != nil {
			continue
		}
		matched := []string{}
		if re, err := compileSubscription(m.regex); err == nil {
			for _, name := range all {
				if re.MatchString(name) {
					matched = append(matched, name)
				}
			}
		}
		g.regexes[m.regex] = matched
		changed = changed || !slices.Equal(old[m.regex], matched)
	}
	return changed || len(old) != len(g.regexes)
}

// subscribedTopics is the union of the members' subscriptions.
func (g *cgroup) subscribedTopics() []string {
	set := map[string]bool{}
	for _, m := range g.members {
		for _, t := range g.subscribed(m) {
			set[t] = true
		}
	}
	return slices.Collect(maps.Keys(set))
}

func (g *cgroup) hasRegex() bool {
	for _, m := range g.members {
		if m.regex != "" {
			return true
		}
	}
	return false
}

// bump moves the group to the next epoch and computes its target
// assignment there over g.parts. gmu is held.
func (g *cgroup) bump() {
	g.epoch++
	g.assignor = g.preferredAssignor()
	in := assignInput{subs: map[string][]string{}, parts: g.parts, prev: g.target}
	for id, m := range g.members {
		var topics []string
		for _, t := range g.subscribed(m) {
			if g.parts[t] > 0 {
				topics = append(topics, t)
			}
		}
		in.subs[id] = topics
	}
	g.target = assign(g.assignor, in)
	g.targetEpoch = g.epoch
}

// preferredAssignor is the assignor most members ask for (uniform when
// they are even or there are none), as Kafka chooses.
func (g *cgroup) preferredAssignor() string {
	counts := map[string]int{}
	for _, m := range g.members {
		counts[m.assignor]++
	}
	if counts[assignorRange] > counts[assignorUniform] {
		return assignorRange
	}
	return assignorUniform
}

// reconcile moves m towards its target given what it reports to own (nil:
// unchanged) and reports whether its assignment changed. gmu is held.
func (g *cgroup) reconcile(m *cgMember, owned map[tpKey]bool, now time.Time) bool {
	if len(m.revoking) > 0 {
		if owned == nil {
			return false
		}
		for k := range m.revoking {
			if owned[k] {
				return false // not revoked yet
			}
		}
		for k := range m.revoking {
			if g.owners[k] == m.id {
				delete(g.owners, k)
			}
		}
		m.revoking, m.revokeBy = map[tpKey]int32{}, time.Time{}
	}
	target := g.target[m.id]
	revoke := map[tpKey]int32{}
	for k, e := range m.assigned {
		if !target[k] {
			revoke[k] = e
		}
	}
	if len(revoke) > 0 {
		for k := range revoke {
			delete(m.assigned, k)
		}
		m.revoking, m.revokeBy = revoke, now.Add(m.rebalance)
		return true
	}
	if m.epoch != g.targetEpoch {
		m.prevEpoch, m.epoch = m.epoch, g.targetEpoch
	}
	changed := false
	for k := range target {
		if _, ok := m.assigned[k]; ok {
			continue
		}
		if _, taken := g.owners[k]; taken {
			continue // unreleased: another member still owns it
		}
		g.owners[k] = m.id
		m.assigned[k] = m.epoch
		changed = true
	}
	return changed
}

// assignmentMsg is m's assignment as a heartbeat answers it.
func (m *cgMember) assignmentMsg() *kmsg.ConsumerGroupHeartbeatResponseAssignment {
	a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
	for _, t := range groupByTopic(m.assigned) {
		at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
		at.TopicID, at.Partitions = topicID(t.topic), t.parts
		a.Topics = append(a.Topics, at)
	}
	a.Topics = slicesNonNil(a.Topics)
	return &a
}

func slicesNonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

type topicParts struct {
	topic string
	parts []int32
}

// groupByTopic lists partitions by topic, both sorted.
func groupByTopic[V any](set map[tpKey]V) []topicParts {
	by := map[string][]int32{}
	for k := range set {
		by[k.topic] = append(by[k.topic], k.part)
	}
	out := make([]topicParts, 0, len(by))
	for _, t := range slices.Sorted(maps.Keys(by)) {
		ps := by[t]
		slices.Sort(ps)
		out = append(out, topicParts{t, ps})
	}
	return out
}

// cgLeave handles epochs -1 (leave) and -2 (a static member's temporary
// leave). gmu is held.
func (s *Server) cgLeave(req *kmsg.ConsumerGroupHeartbeatRequest, resp *kmsg.ConsumerGroupHeartbeatResponse, now time.Time) kmsg.Response {
	resp.MemberID, resp.MemberEpoch = kmsg.StringPtr(req.MemberID), req.MemberEpoch
	g := s.cg.groups[req.Group]
	var m *cgMember
	if g != nil {
		m = g.members[req.MemberID]
		if inst := deref(req.InstanceID); m == nil && inst != "" {
			if held, ok := g.statics[inst]; ok {
				resp.ErrorCode = errFencedInstanceID
				resp.ErrorMessage = kmsg.StringPtr(fmt.Sprintf("Instance id %s is held by member %s.", inst, held))
				return resp
			}
		}
	}
	if m == nil {
		resp.ErrorCode = errUnknownMemberID
		resp.ErrorMessage = kmsg.StringPtr(fmt.Sprintf("Member %s is not a member of group %s.", req.MemberID, req.Group))
		return resp
	}
	if req.MemberEpoch == -2 {
		// Kafka wants the instance id in a -2 leave; franz-go sends only
		// the member id, which names the static member as well.
		if m.instanceID == "" {
			resp.ErrorCode = errInvalidRequest
			resp.ErrorMessage = kmsg.StringPtr("MemberEpoch -2 is for static members: the member has no instance id.")
			return resp
		}
		if m.epoch != -2 {
			m.prevEpoch, m.epoch = m.epoch, -2
		}
		m.deadline = now.Add(s.cg.sessionTimeout())
		return resp
	}
	g.remove(m)
	return resp
}

// remove drops member m, frees what it owns and rebalances. gmu is held.
func (g *cgroup) remove(m *cgMember) {
	for k, owner := range g.owners {
		if owner == m.id {
			delete(g.owners, k)
		}
	}
	if m.instanceID != "" && g.statics[m.instanceID] == m.id {
		delete(g.statics, m.instanceID)
	}
	delete(g.members, m.id)
	delete(g.target, m.id)
	if len(g.members) == 0 {
		g.epoch++
		g.targetEpoch, g.parts, g.regexes = g.epoch, map[string]int32{}, nil
		return
	}
	parts := map[string]int32{}
	for _, t := range g.subscribedTopics() {
		if n, ok := g.parts[t]; ok {
			parts[t] = n
		}
	}
	g.parts = parts
	g.bump()
}

// expireConsumerGroups removes members whose session timed out and
// members that did not revoke within their rebalance timeout. gmu is held.
func (s *Server) expireConsumerGroups(now time.Time) {
	for _, g := range s.cg.groups {
		for _, m := range g.members {
			switch {
			case now.After(m.deadline):
				s.log.Info("kafka: consumer group member session expired", "group", g.name, "member", m.id)
				g.remove(m)
			case len(m.revoking) > 0 && now.After(m.revokeBy):
				s.log.Info("kafka: consumer group member did not revoke within its rebalance timeout", "group", g.name, "member", m.id)
				g.remove(m)
			}
		}
	}
}

// consumerGroupBusy reports whether group is a consumer group with
// members; an empty one is dropped (it becomes a classic group, or is
// deleted). gmu is held.
func (s *Server) consumerGroupBusy(group string) bool {
	g := s.cg.groups[group]
	if g == nil {
		return false
	}
	if len(g.members) > 0 {
		return true
	}
	delete(s.cg.groups, group)
	return false
}
