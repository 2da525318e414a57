package kafka

// Leaders and replica assignments: a partition is a queue of a broker
// group; its replicas are the group's members (their Kafka node ids, the
// master first, as Metadata lists them) and its leader the group's
// master, which is therefore always the preferred replica. Which member
// is master is the broker group's business (fixed by brokerRole, or
// elected by the controllers: keel controller switch-over moves it), not
// a Kafka client's. So:
//
//	ElectLeaders                  ELECTION_NOT_NEEDED (84) for each
//	                              partition named whose group has a
//	                              master (preferred or unclean: the
//	                              leader is the preferred replica and
//	                              alive), the message naming its node id;
//	                              PREFERRED_LEADER_NOT_AVAILABLE (80), or
//	                              ELIGIBLE_LEADERS_NOT_AVAILABLE (83) for
//	                              unclean, while the group has none (in
//	                              controller mode the controllers elect
//	                              one); all partitions (null topics): an
//	                              empty answer, as Kafka leaves out the
//	                              partitions that need no election
//	ListPartitionReassignments    no reassignment is ever in progress: an
//	                              empty answer
//	AlterPartitionAssignments     the partition's own replicas (as
//	                              Metadata lists them) are accepted and
//	                              change nothing; any other assignment
//	                              INVALID_REPLICA_ASSIGNMENT (39), a
//	                              cancellation (null replicas)
//	                              NO_REASSIGNMENT_IN_PROGRESS (85)
//
// An unknown topic or partition gets UNKNOWN_TOPIC_OR_PARTITION (3).

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	errPreferredLeaderNotAvailable  int16 = 80
	errEligibleLeadersNotAvailable  int16 = 83
	errElectionNotNeeded            int16 = 84
	errNoReassignmentInProgress     int16 = 85
	msgNoReassignmentToCancel             = "no reassignment is in progress: a partition's replicas are its broker group"
	msgUnknownTopicOrPartitionElect       = "unknown topic or partition"
)

// partitionGroup is the broker group hosting partition p of topic, as
// Metadata describes it (leader -1: the group has no master now), and the
// group's name.
func (s *Server) partitionGroup(topic string, p int32) (*groupInfo, string, bool) {
	cs := s.cluster(false)
	tc, here := s.core.Topic(topic)
	g, _, ok := locate(cs.layout(topic, tc, here), p)
	if !ok {
		return nil, "", false
	}
	if s.cfg.Cluster == nil {
		id := s.cfg.NodeID
		return &groupInfo{leader: id, replicas: []int32{id}, isr: []int32{id}}, g, true
	}
	gi := cs.groups[g]
	return gi, g, gi != nil
}

func (s *Server) electLeaders(req *kmsg.ElectLeadersRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewElectLeadersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewElectLeadersResponseTopicPartition()
			rp.Partition = p
			g, name, ok := s.partitionGroup(t.Topic, p)
			switch {
			case !ok:
				rp.ErrorCode, rp.ErrorMessage = errUnknownTopicOrPartition, kmsg.StringPtr(msgUnknownTopicOrPartitionElect)
			case g.leader < 0:
				rp.ErrorCode = errPreferredLeaderNotAvailable
				if req.ElectionType == 1 {
					rp.ErrorCode = errEligibleLeadersNotAvailable
				}
				rp.ErrorMessage = kmsg.StringPtr(fmt.Sprintf("broker group %s has no master now; its master is elected by the broker group (or its controllers), not by ElectLeaders", name))
			default:
				rp.ErrorCode, rp.ErrorMessage = errElectionNotNeeded, kmsg.StringPtr(fmt.Sprintf(
					"the partition's leader is node %d, its preferred replica: the master of broker group %s (in controller mode, keel controller switch-over moves it)", g.leader, name))
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *Server) alterPartitionAssignments(req *kmsg.AlterPartitionAssignmentsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			rp.Partition = p.Partition
			g, name, ok := s.partitionGroup(t.Topic, p.Partition)
			switch {
			case !ok:
				rp.ErrorCode, rp.ErrorMessage = errUnknownTopicOrPartition, kmsg.StringPtr(msgUnknownTopicOrPartitionElect)
			case p.Replicas == nil:
				rp.ErrorCode, rp.ErrorMessage = errNoReassignmentInProgress, kmsg.StringPtr(msgNoReassignmentToCancel)
			case slices.Equal(p.Replicas, g.replicas):
				// The partition's own assignment: nothing to move.
			default:
				rp.ErrorCode, rp.ErrorMessage = errInvalidReplicaAssignment, kmsg.StringPtr(fmt.Sprintf(
					"reassignment is not supported: a partition's replicas are its broker group %s, nodes %v", name, g.replicas))
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *Server) listPartitionReassignments(req *kmsg.ListPartitionReassignmentsRequest) kmsg.Response {
	return req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse) // none in progress, ever
}

// clusterDenied answers a cluster-wide admin request of an account that
// is not an admin (CLUSTER_AUTHORIZATION_FAILED); nil for other requests.
func clusterDenied(body kmsg.Request, msg *string) kmsg.Response {
	switch b := body.(type) {
	case *kmsg.ElectLeadersRequest:
		r := b.ResponseKind().(*kmsg.ElectLeadersResponse)
		r.ErrorCode = errClusterAuthorization
		for _, t := range b.Topics {
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewElectLeadersResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.ErrorMessage = p, errClusterAuthorization, msg
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r
	case *kmsg.AlterPartitionAssignmentsRequest:
		r := b.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
		r.ErrorCode, r.ErrorMessage = errClusterAuthorization, msg
		return r
	case *kmsg.ListPartitionReassignmentsRequest:
		r := b.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
		r.ErrorCode, r.ErrorMessage = errClusterAuthorization, msg
		return r
	}
	return aclDenied(body, msg)
}
