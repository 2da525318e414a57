package kafka

// Follower fetching (KIP-392). Every member registers its rack
// (kafkaBrokerRack), which Metadata lists. A slave's door serves
// consumers only (Config.Follower): Fetch of its group's partitions, up
// to its high watermark — what its store made visible, which on a slave
// is never beyond what the master confirmed — and the requests a
// consumer or a client picking any broker needs beside (ApiVersions,
// Metadata, FindCoordinator, DescribeCluster, ListOffsets,
// OffsetForLeaderEpoch, InitProducerId without a transactional id, the
// Describe and List admin reads, SASL); a produce or a group request is
// answered as by any broker that does not lead or coordinate
// (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR), and anything else — every
// request that would change something — closes the connection (clients
// retry at another broker), so that a slave never changes its store on a
// client's request. A fetch past the slave's high watermark (the master has
// confirmed more than the slave shows yet) answers OFFSET_NOT_AVAILABLE,
// which clients retry; one below its log start OFFSET_OUT_OF_RANGE, as
// on the leader.
//
// The leader answers a Fetch (v11+) naming a client rack that is not
// its own with the partition's PreferredReadReplica: a slave of the
// group with a Kafka door, in that rack and in sync, and no records; the
// client then fetches from it. A slave that falls out of sync is no
// longer preferred for the clients that ask the leader next. A client
// already at the slave stays there on the errors it retries (franz-go
// retries UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
// OFFSET_NOT_AVAILABLE and failed connections at the same replica, and
// goes back to the leader on a metadata change of the partition, an
// OFFSET_OUT_OF_RANGE below the log start, or its periodic recheck), so
// the leader names only a slave in sync, which has the partition.

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// errOffsetNotAvailable: the offset is beyond a follower's high
// watermark.
const errOffsetNotAvailable int16 = 78

// followerServes reports whether a slave's door serves body: the reads,
// and the requests every broker that does not lead or coordinate answers
// with an error (a produce, the group requests), and InitProducerId
// without a transactional id, which writes nothing.
func followerServes(body kmsg.Request) bool {
	switch b := body.(type) {
	case *kmsg.ApiVersionsRequest, *kmsg.MetadataRequest, *kmsg.FetchRequest, *kmsg.ListOffsetsRequest,
		*kmsg.OffsetForLeaderEpochRequest, *kmsg.FindCoordinatorRequest, *kmsg.DescribeClusterRequest,
		*kmsg.DescribeConfigsRequest, *kmsg.DescribeGroupsRequest, *kmsg.ListGroupsRequest,
		*kmsg.DescribeACLsRequest, *kmsg.DescribeClientQuotasRequest, *kmsg.DescribeUserSCRAMCredentialsRequest,
		*kmsg.ListPartitionReassignmentsRequest, *kmsg.ProduceRequest,
		*kmsg.JoinGroupRequest, *kmsg.SyncGroupRequest, *kmsg.HeartbeatRequest, *kmsg.LeaveGroupRequest,
		*kmsg.OffsetCommitRequest, *kmsg.OffsetFetchRequest, *kmsg.OffsetDeleteRequest:
		return true
	case *kmsg.InitProducerIDRequest:
		return b.TransactionalID == nil
	}
	return false
}

// fetchQueue translates partition p of topic for a Fetch: as localQueue,
// and on a slave's door the partitions of its own group too.
func (s *Server) fetchQueue(cs *clusterState, topic string, p int32) (int32, int16) {
	if !s.cfg.Follower || s.cfg.Cluster == nil {
		return s.localQueue(cs, topic, p)
	}
	tc, here := s.core.Topic(topic)
	layout := cs.layout(topic, tc, here)
	g, q, ok := locate(layout, p)
	switch {
	case len(layout) == 0 || !ok:
		return p, errUnknownTopicOrPartition
	case g != s.cfg.Group, cs.missingBefore(topic, tc) != "":
		return p, errNotLeaderOrFollower
	}
	return q, errNone
}

// preferredReader is the slave a consumer of rack should fetch this
// group's partitions from (-1: none, fetch here): one with a Kafka door
// in rack and in sync; rack empty or this broker's own: none.
func (cs *clusterState) preferredReader(rack string) int32 {
	s := cs.s
	if rack == "" || rack == s.cfg.Rack || s.cfg.Follower || s.cfg.Cluster == nil {
		return -1
	}
	g := cs.groups[s.cfg.Group]
	if g == nil {
		return -1
	}
	// In sync as the replication knows it now, as Metadata tells the
	// clients, not as last registered: a registration trails a role change
	// by a heartbeat, and the clients would be sent to the follower and
	// back.
	isr := g.isr
	if s.cfg.LocalGroup != nil {
		if local := s.cfg.LocalGroup(); local.InSync != nil {
			isr = nil
			for _, id := range local.InSync {
				if n, ok := g.nodes[id]; ok {
					isr = append(isr, n)
				}
			}
		}
	}
	best := int32(-1)
	for node, r := range g.readers {
		if r == rack && slices.Contains(isr, node) && (best < 0 || node < best) {
			best = node
		}
	}
	return best
}
