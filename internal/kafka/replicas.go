package kafka

// Leaders and replica assignments: a partition is a queue of this broker
// group, its one Kafka replica node 0, always its leader (the group's
// slaves copy the whole CommitLog, not partitions, and are not Kafka
// replicas). So:
//
//	ElectLeaders                  ELECTION_NOT_NEEDED (84) for each
//	                              partition named (preferred or unclean:
//	                              the leader is the preferred replica and
//	                              alive); all partitions (null topics):
//	                              an empty answer, as Kafka leaves out
//	                              the partitions that need no election
//	ListPartitionReassignments    no reassignment is ever in progress: an
//	                              empty answer
//	AlterPartitionReassignments   replicas [0] (the partition's own) is
//	                              accepted and changes nothing; any other
//	                              assignment INVALID_REPLICA_ASSIGNMENT
//	                              (39), a cancellation (null replicas)
//	                              NO_REASSIGNMENT_IN_PROGRESS (85)
//
// An unknown topic or partition gets UNKNOWN_TOPIC_OR_PARTITION (3).

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	errElectionNotNeeded            int16 = 84
	errNoReassignmentInProgress     int16 = 85
	msgReassignmentNotSupported           = "reassignment is not supported: a partition's replicas are its broker group (node 0 only)"
	msgElectionNotNeeded                  = "the partition's leader is its preferred replica, node 0, the broker group's only Kafka replica"
	msgNoReassignmentToCancel             = "no reassignment is in progress: a partition's replicas are its broker group"
	msgUnknownTopicOrPartitionElect       = "unknown topic or partition"
)

// partitionExists reports whether topic has partition p.
func (s *Server) partitionExists(topic string, p int32) (topicKnown, partKnown bool) {
	tc, ok := s.core.Topic(topic)
	if !ok {
		return false, false
	}
	return true, p >= 0 && p < tc.ReadQueueNums
}

func (s *Server) electLeaders(req *kmsg.ElectLeadersRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewElectLeadersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewElectLeadersResponseTopicPartition()
			rp.Partition = p
			if _, ok := s.partitionExists(t.Topic, p); ok {
				rp.ErrorCode, rp.ErrorMessage = errElectionNotNeeded, kmsg.StringPtr(msgElectionNotNeeded)
			} else {
				rp.ErrorCode, rp.ErrorMessage = errUnknownTopicOrPartition, kmsg.StringPtr(msgUnknownTopicOrPartitionElect)
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
			_, ok := s.partitionExists(t.Topic, p.Partition)
			switch {
			case !ok:
				rp.ErrorCode, rp.ErrorMessage = errUnknownTopicOrPartition, kmsg.StringPtr(msgUnknownTopicOrPartitionElect)
			case p.Replicas == nil:
				rp.ErrorCode, rp.ErrorMessage = errNoReassignmentInProgress, kmsg.StringPtr(msgNoReassignmentToCancel)
			case len(p.Replicas) == 1 && p.Replicas[0] == 0:
				// The partition's own assignment: nothing to move.
			default:
				rp.ErrorCode, rp.ErrorMessage = errInvalidReplicaAssignment, kmsg.StringPtr(msgReassignmentNotSupported)
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
