package kafka

// Metadata: one broker (node 0) leads every partition; Kafka topics are
// the core's topics and a topic's partitions its read queues. A topic a
// client asks for that does not exist is created by the core's rules
// (autoCreateTopicEnable, the TBW102 template's queue count) when the
// request allows it. Topic ids are derived from the name (the first 16
// bytes of its SHA-256), so they are stable across restarts; a deleted and
// recreated topic gets the same id. System, retry and dead-letter topics
// are not listed.

import (
	"crypto/sha256"
	"errors"

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
	resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 0, Host: s.cfg.AdvertisedHost, Port: s.advPort.Load()}}
	resp.ClusterID = kmsg.StringPtr(s.cfg.ClusterID)
	resp.ControllerID = 0
	if req.Topics == nil { // all topics (v0: an empty list means all too)
		for _, tc := range s.core.Topics() {
			if message.KindOfTopic(tc.TopicName) == message.TopicNormal {
				resp.Topics = append(resp.Topics, metadataTopic(tc, errNone))
			}
		}
		return resp
	}
	if len(req.Topics) == 0 && req.Version == 0 {
		req.Topics = nil
		return s.metadata(req)
	}
	autoCreate := req.AllowAutoTopicCreation || req.Version < 4
	for _, t := range req.Topics {
		if t.Topic == nil {
			rt := kmsg.NewMetadataResponseTopic()
			rt.TopicID, rt.ErrorCode = t.TopicID, errUnknownTopicOrPartition
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		name := *t.Topic
		tc, ok := s.core.Topic(name)
		var err error
		if !ok && autoCreate {
			tc, ok, err = s.autoCreate(name)
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
		resp.Topics = append(resp.Topics, metadataTopic(tc, errNone))
	}
	return resp
}

func metadataTopic(tc core.TopicConfig, code int16) kmsg.MetadataResponseTopic {
	rt := kmsg.NewMetadataResponseTopic()
	rt.Topic, rt.TopicID, rt.ErrorCode = kmsg.StringPtr(tc.TopicName), topicID(tc.TopicName), code
	for q := int32(0); q < tc.ReadQueueNums; q++ {
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Partition, p.Leader, p.LeaderEpoch = q, 0, 0
		p.Replicas, p.ISR = []int32{0}, []int32{0}
		rt.Partitions = append(rt.Partitions, p)
	}
	return rt
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
