package kafka

// Topics spread over the cluster's broker groups. In a cluster of
// several groups, CreateTopics spreads a topic's partitions over the
// groups whose master is live (this broker's included), in brokerName
// order, as evenly as they divide: with n partitions over g groups, the
// first n mod g groups get ceil(n/g) queues and the others floor(n/g)
// (none when n < g), so the partitions are those groups' queues in the
// layout every RocketMQ client sees too (cluster.go). This broker creates
// its share and, once the NameServer lists it, asks the other masters to
// create theirs (Peers, broker to broker, in parallel); if any of them
// fails, the shares created are deleted again and the topic is refused
// with the failure. CreatePartitions
// on a spread topic adds every new queue to the last group hosting it in
// brokerName order, so that no existing partition changes its number.
// Both then wait (a few seconds at most) for the NameServer's view to show
// the new layout, so that the answer is followed by Metadata that agrees.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/keelmq/keel/internal/core"
)

// layoutWait bounds the wait for the NameServer's view to show a topic
// change made on several groups.
const layoutWait = 5 * time.Second

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
// for user (the client's SASL account, "" for none).
func (s *Server) createSpread(cs *clusterState, user string, tc core.TopicConfig, groups []string) (int16, string) {
	parts := tc.ReadQueueNums
	share := map[string]int32{}
	var keys []groupTopic
	for i, n := range shares(parts, len(groups)) {
		if n == 0 {
			continue
		}
		share[groups[i]] = n
		if groups[i] != s.cfg.Group {
			keys = append(keys, groupTopic{groups[i], tc.TopicName})
		}
	}
	localCode, localMsg, local := errNone, "", false
	if n := share[s.cfg.Group]; n > 0 {
		mine := tc
		mine.ReadQueueNums, mine.WriteQueueNums = n, n
		if err := s.core.UpdateKafkaTopic(mine); err != nil {
			localCode, localMsg = coreCode(err), err.Error()
			if errors.Is(err, core.ErrInvalidArgument) {
				localCode = errInvalidTopic
			}
		} else {
			local = true
			s.parts.forget(tc.TopicName)
		}
	}
	var errs map[groupTopic]error
	deadline := time.Now().Add(layoutWait)
	if local && len(keys) > 0 {
		// The NameServer holds this share before any other group makes
		// its own, so that a view listing theirs lists this one too
		// (cluster.go's topicsChanged).
		s.awaitShare(tc.TopicName, share[s.cfg.Group], deadline)
	}
	if localCode == errNone {
		errs = s.forward(cs, user, keys, func(ctx context.Context, addr string, k groupTopic) error {
			return s.cfg.Peers.CreateTopic(ctx, addr, k.topic, share[k.group], tc.Attributes)
		})
	}
	var failed error
	var failedGroup string
	for _, k := range keys {
		if err := errs[k]; err != nil && failed == nil {
			failed, failedGroup = err, k.group
		}
	}
	if localCode == errNone && failed == nil {
		s.awaitLayout(tc.TopicName, parts, deadline)
		return errNone, ""
	}
	// Undo what was created.
	var undo []groupTopic
	for _, k := range keys {
		if errs != nil && errs[k] == nil {
			undo = append(undo, k)
		}
	}
	s.forward(cs, user, undo, func(ctx context.Context, addr string, k groupTopic) error {
		return s.cfg.Peers.DeleteTopic(ctx, addr, k.topic)
	})
	if local {
		if err := s.core.DeleteTopic(tc.TopicName); err != nil {
			s.log.Error("kafka: create topics: this group's share not undone", "topic", tc.TopicName, "err", err)
		}
		s.parts.forget(tc.TopicName)
	}
	if localCode != errNone {
		return localCode, localMsg
	}
	switch {
	case errors.Is(failed, ErrTopicExists):
		return errTopicAlreadyExists, "topic " + tc.TopicName + " already exists on broker group " + failedGroup
	case errors.Is(failed, core.ErrForbidden):
		return errTopicAuthorization, "broker group " + failedGroup + " refused its share of the topic to this account: " + failed.Error()
	}
	return errCoordinatorNotAvailable, "broker group " + failedGroup + " could not create its share of the topic: " + failed.Error()
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

// awaitShare refreshes the cluster view until the NameServer lists this
// group's n queues of topic, at most until deadline.
func (s *Server) awaitShare(topic string, n int32, deadline time.Time) {
	for {
		s.refreshCluster()
		s.cc.mu.Lock()
		listed := slices.Contains(s.cc.view.Topics[topic], TopicGroup{Group: s.cfg.Group, Queues: n})
		s.cc.mu.Unlock()
		if listed || time.Now().After(deadline) {
			return
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
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
