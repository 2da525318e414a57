package kafka

// Topics spread over the cluster's broker groups. In a cluster of
// several groups, CreateTopics spreads a topic's partitions over the
// groups whose master is live (this broker's included), in brokerName
// order, as evenly as they divide: with n partitions over g groups, the
// first n mod g groups get ceil(n/g) queues and the others floor(n/g)
// (none when n < g), so the partitions are those groups' queues in the
// layout every RocketMQ client sees too (cluster.go). The shares are made
// one group at a time in that order (this broker's itself, the others'
// by their masters, Peers, broker to broker), each once every NameServer
// that answers lists the ones before it; if one fails, or the
// NameServers do not list a share within layoutWait, the shares created
// are deleted again and the topic is refused with the failure. CreatePartitions
// on a spread topic adds every new queue to the last group hosting it in
// brokerName order, so that no existing partition changes its number.
// Both then wait (a few seconds at most) for the NameServer's view to show
// the new layout, so that the answer is followed by Metadata that agrees.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/core"
)

// layoutWait bounds the wait for the NameServer's view to show a topic
// change made on several groups.
const layoutWait = 5 * time.Second

// attrSpreadAfter, in a share of a topic CreateTopics spread, names the
// groups whose shares come before it (comma-separated): a view showing one
// of them in the cluster without its share is missing it, and this group's
// partitions are not numbered from it (cluster.go's localQueue).
const attrSpreadAfter = core.KafkaAttributePrefix + "spreadAfter"

// spreadGroups is the broker groups a topic created here is spread over:
// those with a live master this broker can reach (itself or through
// Peers), in brokerName order; nil without a cluster or Peers.
func (cs *clusterState) spreadGroups() []string {
	s := cs.s
	if s.cfg.Cluster == nil || s.cfg.Peers == nil || !s.leads() {
		return nil
	}
	var out []string
	for name, g := range cs.groups {
		if name == s.cfg.Group || g.leader >= 0 && g.leaderAddr != "" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// shares splits n queues over g groups: the first n mod g get one more.
func shares(n int32, g int) []int32 {
	out := make([]int32, g)
	for i := range out {
		out[i] = n / int32(g)
		if int32(i) < n%int32(g) {
			out[i]++
		}
	}
	return out
}

// createSpread creates tc (its queue count the topic's partitions) over
// groups: this group's share here, the others' on their masters, asked
// for user (the client's SASL account, "" for none). The shares are made
// one at a time in layout order, each only once every NameServer that
// answers lists the ones before it (awaitListed): a group's view fetched
// after its share was made (cluster.go's topicsChanged) lists every group
// before it, so no group numbers its queues from a view missing one.
func (s *Server) createSpread(cs *clusterState, user string, tc core.TopicConfig, groups []string) (int16, string) {
	parts := tc.ReadQueueNums
	deadline := time.Now().Add(layoutWait)
	var made []TopicGroup // the shares created, in layout order
	code, msg := errNone, ""
	for i, n := range shares(parts, len(groups)) {
		if n == 0 {
			break // the shares only shrink: none after
		}
		g := groups[i]
		var before []string
		for _, tg := range made {
			before = append(before, tg.Group)
		}
		if len(made) > 0 && !s.awaitListed(tc.TopicName, made, deadline) {
			code, msg = errRequestTimedOut, "the NameServers did not all list the shares of the topic on broker groups "+strings.Join(before, ", ")+" within "+layoutWait.String()+" (a registration late or a NameServer behind), so broker group "+g+" was not asked for its share; retry"
			break
		}
		attrs := tc.Attributes
		if len(made) > 0 {
			attrs = maps.Clone(tc.Attributes)
			if attrs == nil {
				attrs = map[string]string{}
			}
			attrs[attrSpreadAfter] = strings.Join(before, ",")
		}
		if g == s.cfg.Group {
			mine := tc
			mine.ReadQueueNums, mine.WriteQueueNums, mine.Attributes = n, n, attrs
			if err := s.core.UpdateKafkaTopic(mine); err != nil {
				code, msg = coreCode(err), err.Error()
				if errors.Is(err, core.ErrInvalidArgument) {
					code = errInvalidTopic
				}
				break
			}
			s.parts.forget(tc.TopicName)
		} else {
			k := groupTopic{g, tc.TopicName}
			errs := s.forward(cs, user, []groupTopic{k}, func(ctx context.Context, addr string, k groupTopic) error {
				return s.cfg.Peers.CreateTopic(ctx, addr, k.topic, n, attrs)
			})
			if err := errs[k]; err != nil {
				switch {
				case errors.Is(err, ErrTopicExists):
					code, msg = errTopicAlreadyExists, "topic "+tc.TopicName+" already exists on broker group "+g
				case errors.Is(err, core.ErrForbidden):
					code, msg = errTopicAuthorization, "broker group "+g+" refused its share of the topic to this account: "+err.Error()
				default:
					code, msg = errCoordinatorNotAvailable, "broker group "+g+" could not create its share of the topic: "+err.Error()
				}
				break
			}
		}
		made = append(made, TopicGroup{Group: g, Queues: n})
	}
	if code == errNone {
		s.awaitLayout(tc.TopicName, parts, deadline)
		return errNone, ""
	}
	// Undo what was created.
	var undo []groupTopic
	for _, tg := range made {
		if tg.Group == s.cfg.Group {
			if err := s.core.DeleteTopic(tc.TopicName); err != nil {
				s.log.Error("kafka: create topics: this group's share not undone", "topic", tc.TopicName, "err", err)
			}
			s.parts.forget(tc.TopicName)
			continue
		}
		undo = append(undo, groupTopic{tg.Group, tc.TopicName})
	}
	s.forward(cs, user, undo, func(ctx context.Context, addr string, k groupTopic) error {
		return s.cfg.Peers.DeleteTopic(ctx, addr, k.topic)
	})
	return code, msg
}

// growSpread raises the partitions of a topic spread over layout to
// count by adding queues to its last group.
func (s *Server) growSpread(cs *clusterState, user, topic string, layout []TopicGroup, count int32, validateOnly bool) (int16, string) {
	var total int32
	for _, tg := range layout {
		total += tg.Queues
	}
	last := layout[len(layout)-1]
	queues := last.Queues + count - total
	switch {
	case count <= total:
		return errInvalidPartitions, "topic " + topic + " has " + itoa32(total) + " partitions; the count can only grow"
	case queues > 1024:
		return errInvalidPartitions, "the new partitions go to broker group " + last.Group + ", which would hold " + itoa32(queues) + " queues (at most 1024)"
	case validateOnly:
		return errNone, ""
	}
	if last.Group == s.cfg.Group {
		tc, ok := s.core.Topic(topic)
		if !ok {
			return errUnknownTopicOrPartition, "topic " + topic + " does not exist"
		}
		tc.ReadQueueNums, tc.WriteQueueNums = queues, queues
		if err := s.putTopic(tc); err != nil {
			return errInvalidPartitions, err.Error()
		}
	} else {
		errs := s.forward(cs, user, []groupTopic{{last.Group, topic}}, func(ctx context.Context, addr string, k groupTopic) error {
			return s.cfg.Peers.GrowTopic(ctx, addr, topic, queues)
		})
		if err := errs[groupTopic{last.Group, topic}]; errors.Is(err, core.ErrForbidden) {
			return errTopicAuthorization, "broker group " + last.Group + " refused to add the queues for this account: " + err.Error()
		} else if err != nil {
			return errCoordinatorNotAvailable, "broker group " + last.Group + " could not add the queues: " + err.Error()
		}
	}
	s.awaitLayout(topic, count, time.Now().Add(layoutWait))
	return errNone, ""
}

// layoutAgreed reports whether every NameServer that answers lists topic
// over the same other groups as layout (this group's own share is this
// broker's to tell), those gone from its cluster left out. A NameServer
// that missed or, restarted, lost a group's registration would have
// CreatePartitions add queues to the wrong group: to this one as the last,
// or here to a topic it shows as this group's alone, renumbering the
// partitions of the groups after it. Without a ClusterEach the one view is
// the layout's own: agreed.
func (s *Server) layoutAgreed(topic string, layout []TopicGroup) bool {
	each, ok := s.cfg.Cluster.(ClusterEach)
	if !ok {
		return true
	}
	var want []string
	for _, tg := range layout {
		if tg.Group != s.cfg.Group {
			want = append(want, tg.Group)
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, clusterTimeout)
	views, err := each.KafkaClusterEach(ctx)
	cancel()
	if err != nil {
		return false
	}
	for _, v := range views {
		live := map[string]bool{}
		for _, b := range v.Brokers {
			live[b.Group] = true
		}
		var got []string
		for _, tg := range v.Topics[topic] {
			if tg.Group != s.cfg.Group && live[tg.Group] {
				got = append(got, tg.Group)
			}
		}
		slices.Sort(got)
		if !slices.Equal(slices.Compact(got), want) {
			return false
		}
	}
	return true
}

// awaitListed waits until every NameServer that answers lists the
// shares of topic in made (at least one answering), at most until
// deadline, and reports whether they did. A NameServer that does not
// answer is left out (each asking bounded by clusterTimeout and the
// deadline), so one that is down delays nothing past the deadline. This
// broker's view is refreshed with the answer as well.
func (s *Server) awaitListed(topic string, made []TopicGroup, deadline time.Time) bool {
	for {
		s.refreshCluster()
		if s.everyNamesrvLists(topic, made, deadline) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-s.ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// everyNamesrvLists reports whether every NameServer that answers (one
// at least) lists the shares of topic in made: with a ClusterEach each is
// asked, else this broker's view (just refreshed) is the one answer.
func (s *Server) everyNamesrvLists(topic string, made []TopicGroup, deadline time.Time) bool {
	var views []ClusterView
	if each, ok := s.cfg.Cluster.(ClusterEach); ok {
		if d := time.Now().Add(clusterTimeout); d.Before(deadline) {
			deadline = d
		}
		ctx, cancel := context.WithDeadline(s.ctx, deadline)
		vs, err := each.KafkaClusterEach(ctx)
		cancel()
		if err != nil {
			return false
		}
		views = vs
	} else {
		s.cc.mu.Lock()
		views = []ClusterView{s.cc.view}
		s.cc.mu.Unlock()
	}
	for _, v := range views {
		for _, tg := range made {
			if !slices.Contains(v.Topics[topic], tg) {
				return false
			}
		}
	}
	return len(views) > 0
}

// awaitLayout refreshes the cluster view until topic has n partitions,
// at most until deadline.
func (s *Server) awaitLayout(topic string, n int32, deadline time.Time) {
	for {
		s.refreshCluster()
		cs := s.cluster(false)
		tc, here := s.core.Topic(topic)
		var total int32
		for _, tg := range cs.layout(topic, tc, here) {
			total += tg.Queues
		}
		if total == n || time.Now().After(deadline) {
			return
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func itoa32(n int32) string { return strconv.Itoa(int(n)) }
