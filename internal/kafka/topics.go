package kafka

// CreateTopics and DeleteTopics on the core's topics. A topic's partition
// count becomes its queue count (read and write, at most the core's
// MaxQueueNums; -1 = defaultTopicQueueNums, the core's default for
// auto-created topics). One node: the replication factor must be -1 or 1
// (INVALID_REPLICATION_FACTOR otherwise); a replica assignment is
// accepted as Kafka checks one (partitions 0..n-1, each with the same
// replica count, no broker twice, only known brokers: here node 0, so
// one replica each; INVALID_REPLICA_ASSIGNMENT otherwise) with
// NumPartitions and ReplicationFactor -1 (INVALID_REQUEST otherwise). A
// topic named twice in one request is refused, every time, with
// INVALID_REQUEST. Topic configs are checked and kept by configs.go
// (INVALID_CONFIG, naming the key, for what cannot be honoured, such as
// compaction). Deleting a topic deletes its messages
// and offsets in the whole broker (RocketMQ consumers' too).

import (
	"errors"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/core"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	errTopicAlreadyExists       int16 = 36
	errInvalidPartitions        int16 = 37
	errInvalidReplicationFactor int16 = 38
	errInvalidReplicaAssignment int16 = 39
	errInvalidConfig            int16 = 40
	errUnknownTopicID           int16 = 100
)

func (s *Server) createTopics(req *kmsg.CreateTopicsRequest, user string) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	named := make(map[string]int, len(req.Topics))
	for _, t := range req.Topics {
		named[t.Topic]++
	}
	for _, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, t.NumPartitions, 1
		code, msg := errInvalidRequest, "topic "+t.Topic+" is named more than once in the request"
		var parts int32
		if named[t.Topic] == 1 {
			code, msg, parts = s.createTopic(t, req.ValidateOnly, user)
		}
		rt.ErrorCode = code
		if msg != "" {
			rt.ErrorMessage = kmsg.StringPtr(msg)
		}
		if code == errNone {
			rt.TopicID, rt.NumPartitions = topicID(t.Topic), parts
		} else {
			rt.NumPartitions, rt.ReplicationFactor = -1, -1
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// createTopic creates topic t (checks only, with validateOnly) for user
// (the client's SASL account, "": none) and returns its partition count.
func (s *Server) createTopic(t kmsg.CreateTopicsRequestTopic, validateOnly bool, user string) (int16, string, int32) {
	parts := t.NumPartitions
	if parts == -1 {
		parts = s.core.DefaultQueueNums()
	}
	if len(t.ReplicaAssignment) > 0 {
		if t.NumPartitions != -1 || t.ReplicationFactor != -1 {
			return errInvalidRequest, "with a replica assignment, the partition count and replication factor must be -1", 0
		}
		n, code, msg := checkReplicaAssignment(t.ReplicaAssignment)
		if code != errNone {
			return code, msg, 0
		}
		parts = n
	}
	switch {
	case t.ReplicationFactor != -1 && t.ReplicationFactor != 1:
		return errInvalidReplicationFactor, "a single-node broker: the replication factor must be 1", 0
	case parts < 1 || parts > 1024:
		return errInvalidPartitions, "partitions must be between 1 and 1024", 0
	}
	if _, ok := s.core.Topic(t.Topic); ok {
		return errTopicAlreadyExists, "topic " + t.Topic + " already exists", 0
	}
	cs := s.cluster(true) // a view at most metadataFresh old: the groups to spread over
	if groups := cs.hostedElsewhere(t.Topic); len(groups) > 0 {
		return errTopicAlreadyExists, "topic " + t.Topic + " already exists on broker group " + strings.Join(groups, ", "), 0
	}
	if err := s.checkNewTopic(t.Topic); err != nil {
		return errInvalidTopic, err.Error(), 0
	}
	tc := core.NewTopicConfig(t.Topic, parts, core.PermRW)
	for _, c := range t.Configs { // configs.go: what may be set per topic
		if code, msg := s.applyTopicConfig(tc.Attributes, c.Name, c.Value); code != errNone {
			return code, msg, 0
		}
	}
	if validateOnly {
		return errNone, "", parts
	}
	if groups := cs.spreadGroups(); len(groups) > 1 && len(t.ReplicaAssignment) == 0 {
		code, msg := s.createSpread(cs, user, tc, groups)
		return code, msg, parts
	}
	if err := s.core.UpdateKafkaTopic(tc); err != nil {
		if errors.Is(err, core.ErrInvalidArgument) {
			return errInvalidTopic, err.Error(), 0
		}
		return coreCode(err), err.Error(), 0
	}
	s.parts.forget(t.Topic)
	s.compact.dropTopic(t.Topic) // a copy left by a topic of the same name
	return errNone, "", parts
}

// checkReplicaAssignment checks an explicit assignment as Kafka does and
// returns its partition count: partitions 0..n-1 each once, the same
// replica count everywhere, no broker twice in a list, and only brokers
// of the cluster (node 0).
func checkReplicaAssignment(as []kmsg.CreateTopicsRequestTopicReplicaAssignment) (int32, int16, string) {
	seen := make(map[int32]bool, len(as))
	for _, a := range as {
		switch {
		case a.Partition < 0 || a.Partition >= int32(len(as)) || seen[a.Partition]:
			return 0, errInvalidReplicaAssignment, "partitions of a replica assignment must be 0 to n-1, each once"
		case len(a.Replicas) != len(as[0].Replicas):
			return 0, errInvalidReplicaAssignment, "every partition of a replica assignment must have the same number of replicas"
		case len(a.Replicas) == 0:
			return 0, errInvalidReplicaAssignment, "a partition of a replica assignment has no replica"
		}
		seen[a.Partition] = true
		for i, r := range a.Replicas {
			if r != 0 {
				return 0, errInvalidReplicaAssignment, "unknown broker " + strconv.Itoa(int(r)) + " in the replica assignment (this cluster has broker 0)"
			}
			if i > 0 {
				return 0, errInvalidReplicaAssignment, "broker 0 is named twice for one partition"
			}
		}
	}
	return int32(len(as)), errNone, ""
}

// checkNewTopic checks the name of a topic about to be created by a Kafka
// client: Kafka's rule (core.ValidateKafkaTopic), and, as Kafka does, no
// collision with an existing topic once '.' is read as '_' (metric names
// conflate the two).
func (s *Server) checkNewTopic(name string) error {
	if err := checkNotInternal(name); err != nil {
		return err
	}
	if err := core.ValidateKafkaTopic(name); err != nil {
		return err
	}
	if !strings.ContainsAny(name, "._") {
		return nil
	}
	norm := strings.ReplaceAll(name, ".", "_")
	for _, tc := range s.core.Topics() {
		if tc.TopicName != name && strings.ReplaceAll(tc.TopicName, ".", "_") == norm {
			return core.Errorf(core.ErrInvalidArgument, "topic %q collides with existing topic %q ('.' and '_' collide in metric names)", name, tc.TopicName)
		}
	}
	return nil
}

func (s *Server) deleteTopics(req *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	names := req.TopicNames
	for _, t := range req.Topics {
		if t.Topic != nil {
			names = append(names, *t.Topic)
			continue
		}
		name := ""
		for _, tc := range s.core.Topics() { // ids are derived from names
			if topicID(tc.TopicName) == t.TopicID {
				name = tc.TopicName
			}
		}
		if name == "" {
			rt := kmsg.NewDeleteTopicsResponseTopic()
			rt.TopicID, rt.ErrorCode = t.TopicID, errUnknownTopicID
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		names = append(names, name)
	}
	for _, name := range names {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID = kmsg.StringPtr(name), topicID(name)
		if _, ok := s.core.Topic(name); !ok {
			rt.ErrorCode = errUnknownTopicOrPartition
		} else if err := s.core.DeleteTopic(name); err != nil {
			rt.ErrorCode, rt.ErrorMessage = coreCode(err), kmsg.StringPtr(err.Error())
		}
		s.parts.forget(name)
		s.compact.dropTopic(name)
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
