package kafka

// The cluster as Kafka clients see it. Without Config.Cluster the door is
// the one broker of its cluster (node Config.NodeID) and leads every
// partition, a topic's partitions being its queues. With it, the door
// derives the cluster from the NameServer's registrations (Cluster's
// view, refreshed every clusterRefresh, before a Metadata answer when
// older than metadataFresh, and before the next request after a topic
// changed here):
//
//   - the brokers are the live members of every broker group of the
//     cluster that registered a Kafka door, with their node ids;
//   - a topic's partitions are its queues on the groups hosting it (with a
//     Kafka door), the groups in brokerName order and each group's queues
//     in queue id order: partition p is queue p-base(g) of the group g
//     whose partitions start at base(g) (the number of queues of the
//     groups before it); this group's own queue count is its topic
//     table's, the others' the NameServer's;
//   - a partition's leader is its group's master (brokerId 0), none
//     (LEADER_NOT_AVAILABLE) without one; its replicas are the group's
//     members, master first; its in-sync set is, for this group on its
//     master, the replication state (Config.LocalGroup), else what the
//     group's master last registered (its in-sync brokerIds, at most a
//     registration period old), else every member; its leader epoch is
//     the master's replication epoch (this group's from the local state,
//     the others' as registered; 0 when unknown);
//   - the controller is the broker with the lowest node id;
//   - a group briefly without any registered member keeps its partitions,
//     without a leader (absent.go).
//
// Produce, Fetch, ListOffsets and DeleteRecords on a partition this
// broker does not lead answer NOT_LEADER_OR_FOLLOWER, so clients refresh
// their metadata; those it leads are translated to its local queue —
// unless the view lacks a share that this group's records as coming
// before it (spread.go's attrSpreadAfter): NOT_LEADER_OR_FOLLOWER too.

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Cluster gives the door the cluster it is part of.
type Cluster interface {
	// KafkaCluster returns the live Kafka brokers of the cluster and the
	// groups hosting each topic, as the NameServer knows them.
	KafkaCluster(ctx context.Context) (ClusterView, error)
}

// ClusterEach is a Cluster that can also ask each of its NameServers
// apart. A broker's view comes from the first of its NameServers that
// answers, so a topic created over several groups is only taken as listed
// once every NameServer that answers lists it (spread.go). A Cluster
// without it has one NameServer as far as the door can tell.
type ClusterEach interface {
	// KafkaClusterEach returns the view of every NameServer that
	// answered before ctx ended, an error when none did.
	KafkaClusterEach(ctx context.Context) ([]ClusterView, error)
}

// ClusterView is a cluster as the NameServer knows it.
type ClusterView struct {
	Brokers []ClusterBroker
	Topics  map[string][]TopicGroup // topic -> the groups hosting it
	// Absent: groups without a registered member whose partitions the
	// door keeps in Topics for now (absent.go); set by the door.
	Absent []string
}

// ClusterBroker is one live member with a Kafka node id; Port 0: a
// replica without a door (a slave), in replica lists but not a broker.
type ClusterBroker struct {
	Group    string // brokerName
	BrokerID int64  // 0: the group's master
	NodeID   int32
	Host     string
	Port     int32
	Addr     string  // its RocketMQ address (Peers' requests); empty: unknown
	Rack     string  // kafkaBrokerRack; empty: none
	Epoch    int32   // its replication epoch; -1: unknown
	InSync   []int64 // a master's in-sync replicas by brokerId; nil: not reported
}

// TopicGroup is one group's queues of a topic.
type TopicGroup struct {
	Group  string
	Queues int32
}

// LocalGroup is this broker's replication state as the door reports it.
type LocalGroup struct {
	Epoch  int32   // -1: unknown
	InSync []int64 // on a master: the in-sync replicas by brokerId, its own included; nil: unknown
}

const (
	clusterRefresh = time.Second
	metadataFresh  = 250 * time.Millisecond
	// viewStale: a per-partition request fetches a view tried longer ago
	// (runClusterRefresh was parked); the refresh keeps it younger.
	viewStale      = clusterRefresh + clusterRefresh/2
	clusterTimeout = 2 * time.Second
)

// clusterCache holds the last view fetched.
type clusterCache struct {
	mu   sync.Mutex
	view ClusterView
	// derived is view's clusterState without the local replication state,
	// for Produce, Fetch and the other per-partition requests (nil: not
	// derived since the last fetch).
	derived *clusterState
	tried   time.Time // of the last fetch, answered or not (zero: never)
	// changed counts topicsChanged calls; viewChanged is what changed was
	// when the last fetch that ended (answered or not) began. A view
	// fetched before the last change serves no request (cluster), also not
	// while a fetch begun after it is under way: the request waits for it.
	changed, viewChanged uint64
	ask                  sync.Mutex // one fetch at a time
	absent               absentMemo // under ask
}

// refreshCluster fetches the view now; on failure the last one stays.
func (s *Server) refreshCluster() { s.refreshClusterOlder(0) }

// refreshClusterOlder fetches the view unless a fetch was tried within
// age: requests arriving together, or while the NameServers do not
// answer, share one fetch and then the cached view.
func (s *Server) refreshClusterOlder(age time.Duration) {
	s.cc.ask.Lock()
	defer s.cc.ask.Unlock()
	s.cc.mu.Lock()
	recent := age > 0 && time.Since(s.cc.tried) <= age && s.cc.viewChanged == s.cc.changed
	s.cc.tried = time.Now()
	changed := s.cc.changed
	s.cc.mu.Unlock()
	if recent {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, clusterTimeout)
	defer cancel()
	v, err := s.cfg.Cluster.KafkaCluster(ctx)
	if err != nil {
		s.log.Debug("kafka: cluster view not refreshed", "err", err)
		s.cc.mu.Lock()
		s.cc.viewChanged = changed // tried: the last copy serves meanwhile
		s.cc.mu.Unlock()
		return
	}
	v = s.cc.absent.keepAbsent(v, time.Now())
	s.cc.mu.Lock()
	s.cc.view, s.cc.derived, s.cc.viewChanged = v, nil, changed
	s.cc.mu.Unlock()
}

// runClusterRefresh refreshes the view every clusterRefresh until Close
// while a client is connected. With none, nobody reads the view: it parks,
// its ticker stopped, until a client connects, and refreshes at once; a
// request that finds the view older than viewStale (one that came before
// that refresh) fetches it first (cluster).
func (s *Server) runClusterRefresh() {
	defer s.wg.Done()
	t := time.NewTicker(clusterRefresh)
	defer t.Stop()
	for {
		s.refreshCluster()
		s.mu.Lock()
		idle := len(s.conns) == 0
		s.mu.Unlock()
		if idle {
			t.Stop()
			s.refreshParked.Store(true)
			select {
			case <-s.ctx.Done():
				return
			case <-s.clusterWake:
			}
			s.refreshParked.Store(false)
			t.Reset(clusterRefresh)
			continue
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.clusterWake: // a connection while refreshing anyway
		}
	}
}

// topicsChanged is called after a topic was created or changed here. A
// view fetched before may lack the other groups' queues of a topic just
// created over several groups, and laid out from it this group's queues
// would take the numbers of partitions before them (a produce of partition
// 0 stored in what is partition 1), so the next request fetches the view
// again (or waits for a fetch begun after the change) before it numbers
// any partition.
func (s *Server) topicsChanged() {
	s.cc.mu.Lock()
	s.cc.changed++
	s.cc.mu.Unlock()
}

// groupInfo is one group as Metadata describes it.
type groupInfo struct {
	leader     int32  // -1: no master
	leaderAddr string // the master's RocketMQ address (Peers), "" for this group or when unknown
	epoch      int32
	replicas   []int32
	isr        []int32
	// readers are the group's slaves with a Kafka door, by node id, with
	// their racks (follower fetching, fetch.go).
	readers map[int32]string
	// nodes maps the members' brokerIds to their node ids.
	nodes map[int64]int32
}

// clusterState is one consistent derivation of the cluster; it is not
// changed once made (requests share it).
type clusterState struct {
	s       *Server
	brokers []kmsg.MetadataResponseBroker // by node id
	// controller is the lowest node id listed: every member names the
	// same one (Kafka clients send admin requests there; it has no other
	// role: each broker creates topics in its own group).
	controller int32
	groups     map[string]*groupInfo
	topics     map[string][]TopicGroup // from the NameServer
}

// cluster returns the cluster for one request. fresh (Metadata,
// DescribeCluster) asks for a view no older than metadataFresh and this
// group's epoch and in-sync set from the local replication state; else
// (the per-partition requests) the last view's derivation serves, this
// group's epoch and in-sync set as registered.
func (s *Server) cluster(fresh bool) *clusterState {
	if s.cfg.Cluster == nil {
		self := kmsg.MetadataResponseBroker{NodeID: s.cfg.NodeID, Host: s.cfg.AdvertisedHost, Port: s.advPort.Load()}
		return &clusterState{s: s, groups: map[string]*groupInfo{}, brokers: []kmsg.MetadataResponseBroker{self}, controller: self.NodeID}
	}
	if fresh {
		s.refreshClusterOlder(metadataFresh)
		s.cc.mu.Lock()
		v := s.cc.view
		s.cc.mu.Unlock()
		local := LocalGroup{Epoch: -1}
		if s.cfg.LocalGroup != nil {
			local = s.cfg.LocalGroup()
		}
		return s.derive(v, local)
	}
	s.cc.mu.Lock()
	stale := time.Since(s.cc.tried) > viewStale || s.cc.viewChanged != s.cc.changed
	s.cc.mu.Unlock()
	if stale {
		s.refreshClusterOlder(viewStale)
	}
	s.cc.mu.Lock()
	defer s.cc.mu.Unlock()
	if s.cc.derived == nil {
		s.cc.derived = s.derive(s.cc.view, LocalGroup{Epoch: -1})
	}
	return s.cc.derived
}

// derive makes the clusterState of view v with this group's local
// replication state.
func (s *Server) derive(v ClusterView, local LocalGroup) *clusterState {
	self := kmsg.MetadataResponseBroker{NodeID: s.cfg.NodeID, Host: s.cfg.AdvertisedHost, Port: s.advPort.Load(), Rack: rackPtr(s.cfg.Rack)}
	cs := &clusterState{s: s, groups: map[string]*groupInfo{}, topics: v.Topics}

	members := map[string][]ClusterBroker{}
	seen := map[int32]bool{s.cfg.NodeID: true}
	cs.brokers = append(cs.brokers, self)
	me := ClusterBroker{Group: s.cfg.Group, BrokerID: s.cfg.BrokerID, NodeID: s.cfg.NodeID, Epoch: -1, Rack: s.cfg.Rack, Port: self.Port}
	replaced := s.cfg.BrokerID == 0 && !s.leads()
	if replaced {
		// A master that learned of a newer one is listed as a replica,
		// after the members; the new master, once registered, leads.
		me.BrokerID = math.MaxInt64
		local = LocalGroup{Epoch: -1}
	}
	for _, b := range v.Brokers {
		if b.Group == s.cfg.Group && b.NodeID == s.cfg.NodeID {
			// Itself (matched by node id, which stays with a replica
			// across role changes), as registered; its address is the
			// local one.
			if !replaced {
				me.Epoch, me.InSync = b.Epoch, b.InSync
			}
			continue
		}
		if seen[b.NodeID] {
			continue // a node id listed twice (the NameServer refuses it)
		}
		seen[b.NodeID] = true
		if b.Port != 0 {
			cs.brokers = append(cs.brokers, kmsg.MetadataResponseBroker{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Rack: rackPtr(b.Rack)})
		}
		members[b.Group] = append(members[b.Group], b)
	}
	members[s.cfg.Group] = append(members[s.cfg.Group], me)
	for _, g := range v.Absent {
		if _, ok := members[g]; !ok {
			cs.groups[g] = &groupInfo{leader: -1, nodes: map[int64]int32{}}
		}
	}
	slices.SortFunc(cs.brokers, func(a, b kmsg.MetadataResponseBroker) int { return cmp.Compare(a.NodeID, b.NodeID) })
	cs.controller = -1
	for name, ms := range members {
		slices.SortFunc(ms, func(a, b ClusterBroker) int { return cmp.Compare(a.BrokerID, b.BrokerID) })
		byID := map[int64]int32{}
		g := &groupInfo{leader: -1, nodes: byID}
		var master *ClusterBroker
		for i := range ms {
			g.replicas = append(g.replicas, ms[i].NodeID)
			byID[ms[i].BrokerID] = ms[i].NodeID
			if ms[i].BrokerID == 0 {
				master = &ms[i]
			}
		}
		epoch, inSync := int32(-1), []int64(nil)
		for i := range ms {
			if ms[i].BrokerID != 0 && ms[i].BrokerID != math.MaxInt64 && ms[i].Port != 0 {
				if g.readers == nil {
					g.readers = map[int32]string{}
				}
				g.readers[ms[i].NodeID] = ms[i].Rack
			}
		}
		if master != nil {
			g.leader, g.leaderAddr = master.NodeID, master.Addr
			if master.Port != 0 && (cs.controller < 0 || master.NodeID < cs.controller) {
				cs.controller = master.NodeID
			}
			epoch, inSync = master.Epoch, master.InSync
		}
		if name == s.cfg.Group {
			if local.Epoch >= 0 {
				epoch = local.Epoch
			}
			if me.BrokerID == 0 && local.InSync != nil {
				inSync = local.InSync
			}
		}
		g.epoch = max(epoch, 0)
		if inSync == nil {
			g.isr = g.replicas
		} else {
			for _, id := range inSync {
				if n, ok := byID[id]; ok {
					g.isr = append(g.isr, n)
				}
			}
			if g.leader >= 0 && !slices.Contains(g.isr, g.leader) {
				g.isr = append([]int32{g.leader}, g.isr...)
			}
		}
		cs.groups[name] = g
	}
	if cs.controller < 0 { // no master with a door: the lowest node id
		cs.controller = cs.brokers[0].NodeID
	}
	return cs
}

// rackPtr is Metadata's rack of a broker (nil: none).
func rackPtr(r string) *string {
	if r == "" {
		return nil
	}
	return &r
}

// layout is topic's partitions: the groups hosting it (with a Kafka
// door) in brokerName order with their queue counts. This group's part is
// its own topic table's, never the NameServer's (which keeps a topic
// deleted here until told: registrations only add) — but on a member that
// does not lead its group (a slave), whose table is a copy of its master's
// that replication may not have brought yet: a topic missing there is
// laid out with its group's part as the master registered it, as every
// other broker lays it out, so that the partitions of the groups after
// this one keep their numbers.
func (cs *clusterState) layout(topic string, local core.TopicConfig, here bool) []TopicGroup {
	if cs.s.cfg.Cluster == nil {
		if !here {
			return nil
		}
		return []TopicGroup{{Group: cs.s.cfg.Group, Queues: local.ReadQueueNums}}
	}
	var out []TopicGroup
	for _, tg := range cs.topics[topic] {
		switch {
		case cs.groups[tg.Group] == nil:
		case tg.Group != cs.s.cfg.Group, !here && !cs.s.leads():
			out = append(out, tg)
		}
	}
	if here {
		out = append(out, TopicGroup{Group: cs.s.cfg.Group, Queues: local.ReadQueueNums})
	}
	slices.SortFunc(out, func(a, b TopicGroup) int { return cmp.Compare(a.Group, b.Group) })
	return out
}

// hostedElsewhere names the other groups hosting topic (with a Kafka
// door), by the NameServer.
func (cs *clusterState) hostedElsewhere(topic string) []string {
	var out []string
	for _, tg := range cs.topics[topic] {
		if tg.Group != cs.s.cfg.Group && cs.groups[tg.Group] != nil {
			out = append(out, tg.Group)
		}
	}
	slices.Sort(out)
	return out
}

// locate finds partition p in a layout: its group and queue there.
func locate(layout []TopicGroup, p int32) (group string, queue int32, ok bool) {
	if p < 0 {
		return "", 0, false
	}
	for _, tg := range layout {
		if p < tg.Queues {
			return tg.Group, p, true
		}
		p -= tg.Queues
	}
	return "", 0, false
}

// leads reports whether this broker leads its group's partitions: it is
// the group's master and was not replaced.
func (s *Server) leads() bool {
	return s.cfg.BrokerID == 0 && (s.cfg.Replaced == nil || !s.cfg.Replaced())
}

// localEpoch is this group's leader epoch as the local replication state
// says (-1: unknown). A broker alone (no Cluster) answers Metadata with
// epoch 0 whatever its replication epoch: it checks no leader epoch.
func (s *Server) localEpoch() int32 {
	if s.cfg.LocalGroup == nil || s.cfg.Cluster == nil {
		return -1
	}
	return s.cfg.LocalGroup().Epoch
}

// checkLeaderEpoch checks a request's CurrentLeaderEpoch (-1: not given)
// against the leader's epoch (-1: unknown), as Kafka does: an older one is
// FENCED_LEADER_EPOCH (the client's metadata is stale: it refreshes), a
// newer one UNKNOWN_LEADER_EPOCH (this broker is behind: the client
// retries).
func checkLeaderEpoch(current, epoch int32) int16 {
	switch {
	case current < 0 || epoch < 0:
		return errNone
	case current < epoch:
		return errFencedLeaderEpoch
	case current > epoch:
		return errUnknownLeaderEpoch
	}
	return errNone
}

// localQueue translates partition p of topic into this broker's queue:
// NOT_LEADER_OR_FOLLOWER when another broker leads it, UNKNOWN_TOPIC_OR_PARTITION
// when the cluster has no such partition. A topic the cluster does not
// know at all is left to the caller (p itself: it may be created here).
func (s *Server) localQueue(cs *clusterState, topic string, p int32) (int32, int16) {
	if s.cfg.Cluster == nil {
		return p, errNone
	}
	tc, here := s.core.Topic(topic)
	layout := cs.layout(topic, tc, here)
	if len(layout) == 0 {
		return p, errNone
	}
	g, q, ok := locate(layout, p)
	switch {
	case !ok:
		return p, errUnknownTopicOrPartition
	case g != s.cfg.Group || !s.leads():
		return p, errNotLeaderOrFollower
	case cs.missingBefore(topic, tc) != "":
		// This group's queues would be numbered too low: the client
		// refreshes its metadata and retries until the view has the share.
		return p, errNotLeaderOrFollower
	}
	return q, errNone
}

// missingBefore names a group whose share of topic comes before this
// group's (tc's attrSpreadAfter) and which cs shows in the cluster without
// that share, "" when none: a view missing a share before this group's
// numbers its queues too low. A group gone from the cluster is not
// missing: the partitions after it renumber, as when a group is removed.
func (cs *clusterState) missingBefore(topic string, tc core.TopicConfig) string {
	after := tc.Attributes[attrSpreadAfter]
	if after == "" {
		return ""
	}
	for g := range strings.SplitSeq(after, ",") { // no slice per request
		if cs.groups[g] == nil {
			continue
		}
		if !slices.ContainsFunc(cs.topics[topic], func(tg TopicGroup) bool { return tg.Group == g }) {
			return g
		}
	}
	return ""
}
