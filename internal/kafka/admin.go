package kafka

// CreatePartitions, DeleteRecords, DescribeCluster, DeleteGroups and
// OffsetDelete.
//
// CreatePartitions raises a topic's queue count (read and write); it never
// lowers it (INVALID_PARTITIONS), as Kafka. DeleteRecords advances a
// partition's log start offset: the new start is kept in the topic's
// attributes ("kafka.logStart.<partition>" in topics.json, written durably
// before the answer), so Fetch, ListOffsets and the answers' log start
// honour it across restarts; the batches below it stay on disk until
// retention removes their segment (a consumer can no longer fetch them).
// A batch straddling the new start is still served whole from its base,
// clients skip the records below the offset they asked for.

import (
	"context"
	"strconv"

	"github.com/keelmq/keel/internal/core"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	errNonEmptyGroup  int16 = 68
	errGroupIDUnknown int16 = 69

	attrLogStartPrefix = core.KafkaAttributePrefix + "logStart."
)

func logStartAttr(p int32) string { return attrLogStartPrefix + strconv.Itoa(int(p)) }

// deletedBelow is the log start DeleteRecords set for partition p of tc
// (0 when none).
func deletedBelow(tc core.TopicConfig, p int32) int64 {
	if len(tc.Attributes) == 0 {
		return 0
	}
	v, ok := tc.Attributes[logStartAttr(p)]
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// partitionBounds is a partition's log start and high watermark, with
// DeleteRecords' start applied.
func (s *Server) partitionBounds(topic string, part *partition) (start, hwm int64, err error) {
	if err := s.parts.checkFormat(part); err != nil {
		return 0, 0, err
	}
	hwm, start = s.parts.highWatermark(part), s.parts.logStart(part)
	if from, ok := s.compact.copyFrom(part.key); ok { // a compacted partition: its copy holds what is below the store's
		start = min(from, hwm)
	}
	if tc, ok := s.core.Topic(topic); ok {
		start = min(max(start, deletedBelow(tc, part.key.queueID)), hwm)
	}
	return start, hwm, nil
}

func (s *Server) createPartitions(req *kmsg.CreatePartitionsRequest, user string) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		code, msg := s.createTopicPartitions(t, req.ValidateOnly, user)
		rt.ErrorCode = code
		if msg != "" {
			rt.ErrorMessage = kmsg.StringPtr(msg)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *Server) createTopicPartitions(t kmsg.CreatePartitionsRequestTopic, validateOnly bool, user string) (int16, string) {
	s.topicMu.Lock()
	defer s.topicMu.Unlock()
	tc, ok := s.core.Topic(t.Topic)
	cs := s.cluster(true)
	layout := cs.layout(t.Topic, tc, ok)
	if !s.layoutAgreed(t.Topic, layout) {
		// This broker's view may be the one behind: fetched again, it is
		// asked once more.
		s.refreshCluster()
		cs = s.cluster(false)
		layout = cs.layout(t.Topic, tc, ok)
	}
	if !s.layoutAgreed(t.Topic, layout) {
		// Grown from a view missing a group, the queues would go to the
		// wrong group and renumber the partitions after them (spread.go).
		return errRequestTimedOut, "the NameServers do not all list topic " + t.Topic + " over the same broker groups yet (a registration has not reached every one); retry"
	}
	if len(layout) > 1 || len(layout) == 1 && !ok {
		// Spread over groups (or hosted by another): the new queues go to
		// the last group, so that no partition is renumbered (spread.go).
		if len(t.Assignment) > 0 {
			return errInvalidRequest, "replica assignments are not supported"
		}
		if s.cfg.Peers == nil && layout[len(layout)-1].Group != s.cfg.Group {
			return errInvalidRequest, "topic " + t.Topic + " is hosted by broker group " + layout[len(layout)-1].Group + ": ask its master"
		}
		return s.growSpread(cs, user, t.Topic, layout, t.Count, validateOnly)
	}
	switch {
	case !ok:
		return errUnknownTopicOrPartition, "topic " + t.Topic + " does not exist"
	case len(t.Assignment) > 0:
		return errInvalidRequest, "replica assignments are not supported"
	case t.Count <= tc.QueueNums():
		return errInvalidPartitions, "topic " + t.Topic + " has " + strconv.Itoa(int(tc.QueueNums())) + " partitions; the count can only grow"
	case t.Count > 1024:
		return errInvalidPartitions, "partitions must be between 1 and 1024"
	}
	if validateOnly {
		return errNone, ""
	}
	tc.ReadQueueNums, tc.WriteQueueNums = t.Count, t.Count
	if err := s.putTopic(tc); err != nil {
		if code := coreCode(err); code != errInvalidTopic {
			return code, err.Error()
		}
		return errInvalidPartitions, err.Error()
	}
	return errNone, ""
}

func (s *Server) deleteRecords(req *kmsg.DeleteRecordsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = s.deleteTopicRecords(t)
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *Server) deleteTopicRecords(t kmsg.DeleteRecordsRequestTopic) []kmsg.DeleteRecordsResponseTopicPartition {
	s.topicMu.Lock()
	defer s.topicMu.Unlock()
	out := make([]kmsg.DeleteRecordsResponseTopicPartition, 0, len(t.Partitions))
	tc, exists := s.core.Topic(t.Topic)
	attrs := map[string]string{}
	for k, v := range tc.Attributes {
		attrs[k] = v
	}
	changed := false
	cs := s.cluster(false)
	for _, p := range t.Partitions {
		rp := kmsg.NewDeleteRecordsResponseTopicPartition()
		rp.Partition, rp.LowWatermark = p.Partition, -1
		q, code := s.localQueue(cs, t.Topic, p.Partition)
		if code != errNone {
			rp.ErrorCode = code
			out = append(out, rp)
			continue
		}
		p.Partition = q // this broker's queue from here on
		if !exists || p.Partition < 0 || p.Partition >= tc.QueueNums() {
			rp.ErrorCode = errUnknownTopicOrPartition
			out = append(out, rp)
			continue
		}
		if !tc.Writable() {
			rp.ErrorCode = errTopicAuthorization
			out = append(out, rp)
			continue
		}
		start, hwm, err := s.partitionBounds(t.Topic, s.parts.get(t.Topic, p.Partition))
		if err != nil {
			rp.ErrorCode = errKafkaStorage
			out = append(out, rp)
			continue
		}
		off := p.Offset
		if off == -1 {
			off = hwm
		}
		switch {
		case off < 0 || off > hwm:
			rp.ErrorCode = errOffsetOutOfRange
		case off <= start:
			rp.LowWatermark = start // nothing to delete
		default:
			attrs[logStartAttr(p.Partition)] = itoa(off)
			rp.LowWatermark, changed = off, true
		}
		out = append(out, rp)
	}
	if changed {
		tc.Attributes = attrs
		if err := s.putTopic(tc); err != nil {
			s.log.Error("kafka: delete records: topic config not written", "topic", t.Topic, "err", err)
			for i := range out {
				if out[i].ErrorCode == errNone {
					out[i].ErrorCode, out[i].LowWatermark = errKafkaStorage, -1
				}
			}
		}
	}
	return out
}

func (s *Server) describeCluster(req *kmsg.DescribeClusterRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	if req.EndpointType > 1 { // 1 = brokers; 2 = controllers, which Keel does not expose
		resp.ErrorCode, resp.ErrorMessage = errUnsupportedEndpointType, kmsg.StringPtr("only broker endpoints are served")
		return resp
	}
	cs := s.cluster(true)
	resp.EndpointType, resp.ClusterID, resp.ControllerID = 1, s.cfg.ClusterID, cs.controller
	for _, mb := range cs.brokers {
		b := kmsg.NewDescribeClusterResponseBroker()
		b.NodeID, b.Host, b.Port = mb.NodeID, mb.Host, mb.Port
		resp.Brokers = append(resp.Brokers, b)
	}
	resp.ClusterAuthorizedOperations = -2147483648 // not asked for, or not computed
	return resp
}

const errUnsupportedEndpointType int16 = 119

// deleteGroups drops groups with no members: their committed offsets
// (shared with a RocketMQ group of the name) and subscription config.
func (s *Server) deleteGroups(req *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	known := map[string]bool{}
	for _, g := range s.core.OffsetGroups() {
		known[g] = true
	}
	deleted := false
	for _, name := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = name
		s.gmu.Lock()
		g := s.groups[name]
		busy := g != nil && len(g.members) > 0 || s.consumerGroupBusy(name)
		if !busy && g != nil {
			delete(s.groups, name)
		}
		s.gmu.Unlock()
		_, configured := s.core.Group(name)
		switch {
		case busy:
			rg.ErrorCode = errNonEmptyGroup
		case g == nil && !known[name] && !configured:
			rg.ErrorCode = errGroupIDUnknown
		default:
			if err := s.core.DeleteGroup(name); err != nil {
				rg.ErrorCode = coreCode(err)
				break
			}
			deleted = true
		}
		resp.Groups = append(resp.Groups, rg)
	}
	if deleted {
		if err := s.core.FlushOffsets(); err != nil {
			s.log.Error("kafka: delete groups: offsets not written", "err", err)
			for i := range resp.Groups {
				if resp.Groups[i].ErrorCode == errNone {
					resp.Groups[i].ErrorCode = errKafkaStorage
				}
			}
		}
	}
	return resp
}

const errGroupSubscribedToTopic int16 = 86

// offsetDelete drops a group's committed offsets of some partitions; a
// topic a member of the group subscribes to (its consumer protocol
// metadata names it) is refused with GROUP_SUBSCRIBED_TO_TOPIC, as Kafka.
func (s *Server) offsetDelete(req *kmsg.OffsetDeleteRequest, user string) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	s.gmu.Lock()
	subscribed := map[string]bool{}
	g := s.groups[req.Group]
	if g != nil {
		for _, m := range g.members {
			for _, p := range m.protocols {
				if p.Name != g.protocol && g.protocol != "" {
					continue
				}
				var md kmsg.ConsumerMemberMetadata
				if md.ReadFrom(p.Metadata) == nil {
					for _, t := range md.Topics {
						subscribed[t] = true
					}
				}
			}
		}
	}
	cgKnown := s.consumerGroupSubscriptions(req.Group, subscribed) // group848_describe.go
	s.gmu.Unlock()
	known := g != nil || cgKnown
	if !known {
		_, known = s.core.Group(req.Group)
	}
	if !known {
		known = len(s.core.OffsetTopics(req.Group)) > 0
	}
	if !known {
		resp.ErrorCode = errGroupIDUnknown
		return resp
	}
	deleted := false
	cs := s.cluster(false)
	type slot struct{ t, p int }
	remote := map[groupTopic][]int32{}
	slots := map[groupTopic][]slot{}
	var keys []groupTopic
	for ti, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		tc, here := s.core.Topic(t.Topic)
		exists := here || s.cfg.Cluster != nil && len(cs.layout(t.Topic, tc, here)) > 0
		for pi, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			switch pl := s.place(cs, t.Topic, p.Partition); {
			case !exists:
				rp.ErrorCode = errUnknownTopicOrPartition
			case subscribed[t.Topic]:
				rp.ErrorCode = errGroupSubscribedToTopic
			case pl.code != errNone:
				rp.ErrorCode = pl.code
			case pl.local:
				if s.core.DeleteOffset(req.Group, t.Topic, pl.queue) {
					deleted = true
				}
			default:
				k := groupTopic{pl.group, t.Topic}
				if slots[k] == nil {
					keys = append(keys, k)
				}
				remote[k] = append(remote[k], pl.queue)
				slots[k] = append(slots[k], slot{ti, pi})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	errs := s.forward(cs, user, keys, func(ctx context.Context, addr string, k groupTopic) error {
		return s.cfg.Peers.DeleteOffsets(ctx, addr, req.Group, k.topic, remote[k])
	})
	for k, err := range errs {
		for _, sl := range slots[k] {
			resp.Topics[sl.t].Partitions[sl.p].ErrorCode = peerCode(err)
		}
	}
	if deleted {
		if err := s.core.FlushOffsets(); err != nil {
			s.log.Error("kafka: offset delete: offsets not written", "group", req.Group, "err", err)
			resp.ErrorCode = errKafkaStorage
		}
	}
	return resp
}
