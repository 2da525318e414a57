package kafka

// FindCoordinator and the coordinator of each consumer group.
//
// A consumer group has one coordinator in the whole cluster:
// coordinatorFor hashes the group id (FNV-1a, 32 bits) over the cluster's
// broker groups in brokerName order, and the chosen group's master
// coordinates it. Every broker derives the same answer from the same
// NameServer view; while the chosen group has no master with a Kafka
// door, FindCoordinator answers COORDINATOR_NOT_AVAILABLE, and the group
// requests sent to any other broker (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups,
// DeleteGroups) answer NOT_COORDINATOR, so that clients ask again and
// move. A broker alone (no Config.Cluster) coordinates every group. The
// group's membership lives in the coordinator's memory (groups.go): when
// the coordinator moves, members rejoin at the new one, as in Kafka. Its
// committed offsets live with the partitions (offsets.go), so they do not
// move with it.
//
// The coordinator of a transactional id (key type 1, txn.go) is the
// broker asked: each broker coordinates the transactions of the
// partitions it leads. Other key types are refused with INVALID_REQUEST.
// FindCoordinator v0 stays in range: librdkafka enables LZ4 and groups
// only with it.

import (
	"context"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// coordinator is the broker coordinating a consumer group, or code why
// there is none now (COORDINATOR_NOT_AVAILABLE).
type coordinator struct {
	node int32
	host string
	port int32
	code int16
}

// coordinatorFor names the coordinator of consumer group id: the master
// of the broker group at index fnv32a(id) mod n of the cluster's n broker
// groups in brokerName order. The choice is the one place that decides
// it (FindCoordinator and the group requests' check both ask here).
func (s *Server) coordinatorFor(id string) coordinator {
	cs := s.cluster(false)
	return cs.coordinatorFor(id)
}

func (cs *clusterState) coordinatorFor(id string) coordinator {
	s := cs.s
	if s.cfg.Cluster == nil || len(cs.groups) == 0 {
		return coordinator{node: s.cfg.NodeID, host: s.cfg.AdvertisedHost, port: s.advPort.Load()}
	}
	names := make([]string, 0, len(cs.groups))
	for name := range cs.groups {
		names = append(names, name)
	}
	slices.Sort(names)
	h := fnv.New32a()
	h.Write([]byte(id))
	g := cs.groups[names[h.Sum32()%uint32(len(names))]]
	if g.leader < 0 {
		return coordinator{node: -1, port: -1, code: errCoordinatorNotAvailable}
	}
	for _, b := range cs.brokers {
		if b.NodeID == g.leader {
			return coordinator{node: b.NodeID, host: b.Host, port: b.Port}
		}
	}
	// The master registered no Kafka door (listed as a replica only).
	return coordinator{node: -1, port: -1, code: errCoordinatorNotAvailable}
}

// coordinates reports whether this broker coordinates group id: errNone,
// else NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE.
func (s *Server) coordinates(id string) int16 {
	c := s.coordinatorFor(id)
	switch {
	case c.code != errNone:
		return c.code
	case c.node != s.cfg.NodeID || !s.leads() && s.cfg.Cluster != nil:
		return errNotCoordinator
	}
	return errNone
}

func (s *Server) findCoordinator(req *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	answer := func(key string) (c coordinator, msg *string) {
		switch req.CoordinatorType {
		case 0:
			return s.coordinatorFor(key), nil
		case 1:
			if code := s.txnReady(); code != errNone {
				return coordinator{node: -1, port: -1, code: code}, nil
			}
			return coordinator{node: s.cfg.NodeID, host: s.cfg.AdvertisedHost, port: s.advPort.Load()}, nil
		}
		return coordinator{node: -1, port: -1, code: errInvalidRequest}, kmsg.StringPtr("unknown coordinator type")
	}
	if req.Version >= 4 {
		for _, k := range req.CoordinatorKeys {
			co, msg := answer(k)
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.ErrorCode, c.ErrorMessage = k, co.code, msg
			c.NodeID, c.Host, c.Port = co.node, co.host, co.port
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp
	}
	co, msg := answer(req.CoordinatorKey)
	resp.ErrorCode, resp.ErrorMessage = co.code, msg
	resp.NodeID, resp.Host, resp.Port = co.node, co.host, co.port
	return resp
}

// notCoordinated answers a group request this broker does not coordinate
// the group of with NOT_COORDINATOR (or COORDINATOR_NOT_AVAILABLE) in
// every place of the response; nil: the request is for this broker (or
// not a group request).
func (s *Server) notCoordinated(body kmsg.Request) kmsg.Response {
	var group string
	switch b := body.(type) {
	case *kmsg.JoinGroupRequest:
		group = b.Group
	case *kmsg.SyncGroupRequest:
		group = b.Group
	case *kmsg.HeartbeatRequest:
		group = b.Group
	case *kmsg.LeaveGroupRequest:
		group = b.Group
	case *kmsg.OffsetCommitRequest:
		group = b.Group
	case *kmsg.OffsetFetchRequest:
		if b.Version >= 8 {
			return nil // several groups: each is checked as a request of its own (offsetFetchGroups)
		}
		group = b.Group
	case *kmsg.OffsetDeleteRequest:
		group = b.Group
	case *kmsg.ConsumerGroupHeartbeatRequest:
		group = b.Group
	default:
		return nil
	}
	code := s.coordinates(group)
	if code == errNone {
		return nil
	}
	switch b := body.(type) {
	case *kmsg.JoinGroupRequest:
		resp := b.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode, resp.Generation = code, -1
		return resp
	case *kmsg.SyncGroupRequest:
		resp := b.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.HeartbeatRequest:
		resp := b.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.LeaveGroupRequest:
		resp := b.ResponseKind().(*kmsg.LeaveGroupResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.OffsetCommitRequest:
		resp := b.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range b.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	case *kmsg.OffsetFetchRequest:
		return offsetFetchFailed(b, b.ResponseKind().(*kmsg.OffsetFetchResponse), code)
	case *kmsg.OffsetDeleteRequest:
		resp := b.ResponseKind().(*kmsg.OffsetDeleteResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.ConsumerGroupHeartbeatRequest:
		resp := b.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		resp.ErrorCode = code
		return resp
	}
	return nil
}

// coordinated serves a group request with serve when this broker
// coordinates its group, else answers it as notCoordinated does.
func (s *Server) coordinated(body kmsg.Request, serve func() kmsg.Response) kmsg.Response {
	if r := s.notCoordinated(body); r != nil {
		return r
	}
	return serve()
}

// describeGroupsHere answers DescribeGroups, NOT_COORDINATOR (or
// COORDINATOR_NOT_AVAILABLE) for the groups this broker does not
// coordinate.
func (s *Server) describeGroupsHere(req *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := s.describeGroups(req).(*kmsg.DescribeGroupsResponse)
	for i := range resp.Groups {
		if code := s.coordinates(resp.Groups[i].Group); code != errNone {
			g := kmsg.NewDescribeGroupsResponseGroup()
			g.Group, g.ErrorCode = resp.Groups[i].Group, code
			resp.Groups[i] = g
		}
	}
	return resp
}

// listGroupsHere answers ListGroups with the groups this broker
// coordinates now (one it coordinated before a move may still be in its
// memory).
func (s *Server) listGroupsHere(req *kmsg.ListGroupsRequest) kmsg.Response {
	resp := s.listGroups(req).(*kmsg.ListGroupsResponse)
	kept := resp.Groups[:0]
	for _, g := range resp.Groups {
		if s.coordinates(g.Group) == errNone {
			kept = append(kept, g)
		}
	}
	resp.Groups = kept
	return resp
}

// deleteGroupsHere deletes the groups of req this broker coordinates and
// answers NOT_COORDINATOR (or COORDINATOR_NOT_AVAILABLE) for the others,
// which it leaves alone.
func (s *Server) deleteGroupsHere(req *kmsg.DeleteGroupsRequest, user string) kmsg.Response {
	mine := *req
	mine.Groups = nil
	var others []kmsg.DeleteGroupsResponseGroup
	for _, name := range req.Groups {
		if code := s.coordinates(name); code != errNone {
			g := kmsg.NewDeleteGroupsResponseGroup()
			g.Group, g.ErrorCode = name, code
			others = append(others, g)
			continue
		}
		mine.Groups = append(mine.Groups, name)
	}
	resp := s.deleteGroups(&mine).(*kmsg.DeleteGroupsResponse)
	for i := range resp.Groups {
		if resp.Groups[i].ErrorCode == errNone {
			resp.Groups[i].ErrorCode = s.deleteOffsetsElsewhere(resp.Groups[i].Group, user)
		}
	}
	resp.Groups = append(resp.Groups, others...)
	return resp
}

// deleteOffsetsElsewhere drops group's committed offsets on the other
// broker groups' masters (those of the partitions they host).
func (s *Server) deleteOffsetsElsewhere(group, user string) int16 {
	if s.cfg.Cluster == nil {
		return errNone
	}
	cs := s.cluster(false)
	var keys []groupTopic
	for name := range cs.groups {
		if name != s.cfg.Group {
			keys = append(keys, groupTopic{group: name})
		}
	}
	errs := s.forward(cs, user, keys, func(ctx context.Context, addr string, k groupTopic) error {
		offs, err := s.cfg.Peers.FetchOffsets(ctx, addr, group, "")
		if err != nil {
			return err
		}
		for topic, qs := range offs {
			queues := slices.Sorted(maps.Keys(qs))
			if err := s.cfg.Peers.DeleteOffsets(ctx, addr, group, topic, queues); err != nil {
				return err
			}
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			return peerCode(err)
		}
	}
	return errNone
}
