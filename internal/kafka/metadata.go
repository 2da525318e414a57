package kafka

// Metadata: the cluster's brokers and each topic's partitions over the
// groups hosting it (cluster.go); a broker alone (no Config.Cluster) is
// node Config.NodeID, leader of every partition, a topic's partitions its
// read queues. A topic a
// client asks for that does not exist is created by the core's rules
// (autoCreateTopicEnable, the TBW102 template's queue count) when the
// request allows it. Topic ids are derived from the name (the first 16
// bytes of its SHA-256), so they are stable across restarts; a deleted and
// recreated topic gets the same id. System, retry and dead-letter topics
// are not listed.

import (
	"crypto/sha256"
	"errors"
	"maps"
	"slices"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func topicID(name string) (id [16]byte) {
	sum := sha256.Sum256([]byte(name))
	copy(id[:], sum[:16])
	return id
}

func (s *Server) metadata(req *kmsg.MetadataRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	cs := s.cluster(true)
	resp.Brokers = cs.brokers
	resp.ClusterID = kmsg.StringPtr(s.cfg.ClusterID)
	resp.ControllerID = cs.controller
	if req.Topics == nil { // all topics (v0: an empty list means all too)
		names := map[string]bool{}
		for _, tc := range s.core.Topics() {
			if message.KindOfTopic(tc.TopicName) == message.TopicNormal {
				names[tc.TopicName] = true
			}
		}
		for name := range cs.topics {
			if message.KindOfTopic(name) == message.TopicNormal {
				names[name] = true
			}
		}
		for _, name := range slices.Sorted(maps.Keys(names)) {
			if rt, ok := cs.metadataTopic(name); ok {
				resp.Topics = append(resp.Topics, rt)
			}
		}
		return resp
	}
	if len(req.Topics) == 0 && req.Version == 0 {
		req.Topics = nil
		return s.metadata(req)
	}
	autoCreate := (req.AllowAutoTopicCreation || req.Version < 4) && !s.cfg.Follower // a slave creates nothing
	// The topics' ids, made at the first topic asked by id.
	var byID map[[16]byte]string
	for _, t := range req.Topics {
		if t.Topic == nil { // by id (v10+): clients resolve the ids other responses name
			if byID == nil {
				byID = s.topicNamesByID()
			}
			if name, ok := byID[t.TopicID]; ok {
				if rt, ok := cs.metadataTopic(name); ok {
					resp.Topics = append(resp.Topics, rt)
					continue
				}
			}
			rt := kmsg.NewMetadataResponseTopic()
			rt.TopicID, rt.ErrorCode = t.TopicID, errUnknownTopicID
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		name := *t.Topic
		if rt, ok := cs.metadataTopic(name); ok {
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		var err error
		ok := false
		if autoCreate {
			_, ok, err = s.autoCreate(name)
		}
		if !ok {
			code := errUnknownTopicOrPartition
			if err != nil && errors.Is(err, core.ErrInvalidArgument) {
				code = errInvalidTopic
			}
			rt := kmsg.NewMetadataResponseTopic()
			rt.Topic, rt.ErrorCode = kmsg.StringPtr(name), code
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		rt, _ := cs.metadataTopic(name)
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// metadataTopic describes topic's partitions over the cluster (cluster.go);
// ok is false when no group hosts it.
func (cs *clusterState) metadataTopic(name string) (kmsg.MetadataResponseTopic, bool) {
	tc, here := cs.s.core.Topic(name)
	layout := cs.layout(name, tc, here)
	if len(layout) == 0 {
		return kmsg.MetadataResponseTopic{}, false
	}
	rt := kmsg.NewMetadataResponseTopic()
	rt.Topic, rt.TopicID = kmsg.StringPtr(name), topicID(name)
	var part int32
	for _, tg := range layout {
		g := cs.groups[tg.Group]
		if cs.s.cfg.Cluster == nil {
			g = &groupInfo{leader: cs.s.cfg.NodeID, replicas: []int32{cs.s.cfg.NodeID}, isr: []int32{cs.s.cfg.NodeID}}
		}
		for q := int32(0); q < tg.Queues; q++ {
			p := kmsg.NewMetadataResponseTopicPartition()
			p.Partition, p.Leader, p.LeaderEpoch = part, g.leader, g.epoch
			p.Replicas, p.ISR = g.replicas, g.isr
			if g.leader < 0 {
				p.ErrorCode = errLeaderNotAvailable
			}
			rt.Partitions = append(rt.Partitions, p)
			part++
		}
	}
	return rt, true
}

// autoCreate creates topic name, unknown so far, by the core's rules
// (autoCreateTopicEnable, the TBW102 template) if its name is one a Kafka
// client may create.
func (s *Server) autoCreate(name string) (core.TopicConfig, bool, error) {
	if err := s.checkNewTopic(name); err != nil {
		return core.TopicConfig{}, false, err
	}
	if !core.IsSendable(name) {
		return core.TopicConfig{}, false, nil
	}
	tc, err := s.core.AutoCreateTopic(name, core.DefaultTopic, 0)
	return tc, err == nil, err
}
