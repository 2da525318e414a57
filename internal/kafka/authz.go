package kafka

// Authorization with Keel's access control (Config.ACL): every request of
// an authenticated connection (sasl.go) is checked against its account's
// rules in plain_acl.yml, read per request so a reload applies at once:
//
//	Produce                                  PUB on the topic
//	Fetch, OffsetCommit/OffsetFetch topics   SUB on the topic
//	ListOffsets, Metadata, DescribeConfigs   PUB or SUB on the topic (a
//	                                         topic without either is left
//	                                         out of a full Metadata list;
//	                                         creating one on Metadata
//	                                         needs PUB)
//	JoinGroup, SyncGroup, Heartbeat,         SUB on the group
//	LeaveGroup, OffsetCommit, OffsetFetch
//	(each group of v8+),
//	ConsumerGroupHeartbeat,
//	OffsetDelete (and SUB on its topics)
//	FindCoordinator, DescribeGroups,         PUB or SUB on the group
//	ConsumerGroupDescribe,
//	ListGroups (filtered)
//	CreateTopics, DeleteTopics,              an admin account (RocketMQ's
//	CreatePartitions, DeleteRecords,         admin codes)
//	AlterConfigs, IncrementalAlterConfigs,
//	DeleteGroups, ElectLeaders, the
//	reassignment APIs, the ACL, SCRAM
//	credential and client quota APIs
//	InitProducerId, DescribeCluster,         any authenticated account
//	broker configs, ListTransactions,        (DescribeTransactions lists
//	DescribeTransactions                     only the topics with PUB or
//	                                         SUB; txnadmin.go)
//	DescribeProducers                        PUB or SUB on the topic
//
// A denied topic, partition or group gets TOPIC_AUTHORIZATION_FAILED (29)
// or GROUP_AUTHORIZATION_FAILED (30) in its place of the response, as
// Kafka answers; the rest of the request is served. The check filters the
// request before its handler and fills the denied entries in after, so
// the handlers know nothing of it.

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// principal is an authenticated user under the access control.
type principal struct {
	acc  Accounts
	user string
}

func (p principal) MayTopic(topic string, need Perm) bool { return p.acc.MayTopic(p.user, topic, need) }
func (p principal) MayGroup(group string, need Perm) bool { return p.acc.MayGroup(p.user, group, need) }

// authorized serves req for an authenticated connection under acct.
func (s *Server) authorized(acct principal, req *request) kmsg.Response {
	topicOK := func(t string, p Perm) bool { return acct.MayTopic(t, p) }
	groupOK := func(g string, p Perm) bool { return acct.MayGroup(g, p) }
	if r, ok := s.authorizedTxn(acct, req.body); ok { // txnauthz.go
		return r
	}
	switch b := req.body.(type) {
	case *kmsg.ProduceRequest:
		var denied []kmsg.ProduceRequestTopic
		b.Topics, denied = splitBy(b.Topics, func(t kmsg.ProduceRequestTopic) bool { return topicOK(t.Topic, PermPub) })
		resp := s.produce(b)
		if r, ok := resp.(*kmsg.ProduceResponse); ok {
			for _, t := range denied {
				rt := kmsg.NewProduceResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewProduceResponseTopicPartition()
					rp.Partition, rp.ErrorCode, rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = p.Partition, errTopicAuthorization, -1, -1, -1
					rt.Partitions = append(rt.Partitions, rp)
				}
				r.Topics = append(r.Topics, rt)
			}
		}
		return resp
	case *kmsg.FetchRequest:
		var denied []kmsg.FetchRequestTopic
		b.Topics, denied = splitBy(b.Topics, func(t kmsg.FetchRequestTopic) bool { return topicOK(t.Topic, PermSub) })
		r := s.fetch(b).(*kmsg.FetchResponse)
		for _, t := range denied {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.Partition, errTopicAuthorization, -1, -1, -1
				rp.RecordBatches = []byte{}
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r
	case *kmsg.ListOffsetsRequest:
		var denied []kmsg.ListOffsetsRequestTopic
		b.Topics, denied = splitBy(b.Topics, func(t kmsg.ListOffsetsRequestTopic) bool { return topicOK(t.Topic, PermAny) })
		r := s.listOffsets(b).(*kmsg.ListOffsetsResponse)
		for _, t := range denied {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.Timestamp, rp.Offset = p.Partition, errTopicAuthorization, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r
	case *kmsg.MetadataRequest:
		return s.authorizedMetadata(acct, b)
	case *kmsg.DescribeConfigsRequest:
		var denied []kmsg.DescribeConfigsRequestResource
		b.Resources, denied = splitBy(b.Resources, func(r kmsg.DescribeConfigsRequestResource) bool {
			return r.ResourceType != resourceTopic || topicOK(r.ResourceName, PermAny)
		})
		r := s.describeConfigs(b).(*kmsg.DescribeConfigsResponse)
		for _, d := range denied {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = d.ResourceType, d.ResourceName, errTopicAuthorization
			r.Resources = append(r.Resources, rr)
		}
		return r
	case *kmsg.JoinGroupRequest:
		if !groupOK(b.Group, PermSub) {
			r := b.ResponseKind().(*kmsg.JoinGroupResponse)
			r.ErrorCode, r.Generation = errGroupAuthorization, -1
			return r
		}
	case *kmsg.SyncGroupRequest:
		if !groupOK(b.Group, PermSub) {
			r := b.ResponseKind().(*kmsg.SyncGroupResponse)
			r.ErrorCode = errGroupAuthorization
			return r
		}
	case *kmsg.HeartbeatRequest:
		if !groupOK(b.Group, PermSub) {
			r := b.ResponseKind().(*kmsg.HeartbeatResponse)
			r.ErrorCode = errGroupAuthorization
			return r
		}
	case *kmsg.LeaveGroupRequest:
		if !groupOK(b.Group, PermSub) {
			r := b.ResponseKind().(*kmsg.LeaveGroupResponse)
			r.ErrorCode = errGroupAuthorization
			return r
		}
	case *kmsg.OffsetCommitRequest:
		if b.Version >= 10 { // topics by id: named, then checked as v9
			return s.offsetCommitByID(b, func(named *kmsg.OffsetCommitRequest) kmsg.Response {
				return s.authorized(acct, &request{key: req.key, version: named.Version, clientID: req.clientID, host: req.host, body: named})
			})
		}
		groupDenied := !groupOK(b.Group, PermSub)
		var denied []kmsg.OffsetCommitRequestTopic
		b.Topics, denied = splitBy(b.Topics, func(t kmsg.OffsetCommitRequestTopic) bool { return !groupDenied && topicOK(t.Topic, PermSub) })
		r := s.coordinated(b, func() kmsg.Response { return s.offsetCommit(b, acct.user) }).(*kmsg.OffsetCommitResponse)
		for _, t := range denied {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, errTopicAuthorization
				if groupDenied {
					rp.ErrorCode = errGroupAuthorization
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r
	case *kmsg.OffsetFetchRequest:
		if b.Version >= 8 { // each group as a request of its own, checked as one
			return s.offsetFetchGroups(b, func(one *kmsg.OffsetFetchRequest) kmsg.Response {
				return s.authorized(acct, &request{key: req.key, version: one.Version, clientID: req.clientID, host: req.host, body: one})
			})
		}
		if !groupOK(b.Group, PermSub) {
			r := b.ResponseKind().(*kmsg.OffsetFetchResponse)
			r.ErrorCode = errGroupAuthorization
			return r
		}
		var denied []kmsg.OffsetFetchRequestTopic
		if b.Topics != nil {
			b.Topics, denied = splitBy(b.Topics, func(t kmsg.OffsetFetchRequestTopic) bool { return topicOK(t.Topic, PermSub) })
		}
		r := s.coordinated(b, func() kmsg.Response { return s.offsetFetch(b, acct.user) }).(*kmsg.OffsetFetchResponse)
		if b.Topics == nil {
			r.Topics, _ = splitBy(r.Topics, func(t kmsg.OffsetFetchResponseTopic) bool { return topicOK(t.Topic, PermSub) })
		}
		for _, t := range denied {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.Offset, rp.LeaderEpoch = p, errTopicAuthorization, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r
	case *kmsg.ConsumerGroupHeartbeatRequest:
		if !groupOK(b.Group, PermSub) {
			r := b.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
			r.ErrorCode = errGroupAuthorization
			return r
		}
	case *kmsg.ConsumerGroupDescribeRequest:
		var denied []string
		b.Groups, denied = splitBy(b.Groups, func(g string) bool { return groupOK(g, PermAny) })
		r := s.consumerGroupDescribe(b).(*kmsg.ConsumerGroupDescribeResponse)
		for _, g := range denied {
			rg := kmsg.NewConsumerGroupDescribeResponseGroup()
			rg.Group, rg.ErrorCode = g, errGroupAuthorization
			r.Groups = append(r.Groups, rg)
		}
		return r
	case *kmsg.FindCoordinatorRequest:
		keys := b.CoordinatorKeys
		if b.Version < 4 {
			keys = []string{b.CoordinatorKey}
		}
		if b.CoordinatorType == 0 {
			for _, k := range keys {
				if !groupOK(k, PermAny) {
					return s.coordinatorDenied(b, keys, groupOK)
				}
			}
		}
	case *kmsg.OffsetDeleteRequest:
		if !groupOK(b.Group, PermSub) {
			r := b.ResponseKind().(*kmsg.OffsetDeleteResponse)
			r.ErrorCode = errGroupAuthorization
			return r
		}
		var denied []kmsg.OffsetDeleteRequestTopic
		b.Topics, denied = splitBy(b.Topics, func(t kmsg.OffsetDeleteRequestTopic) bool { return topicOK(t.Topic, PermSub) })
		r := s.coordinated(b, func() kmsg.Response { return s.offsetDelete(b, acct.user) }).(*kmsg.OffsetDeleteResponse)
		for _, t := range denied {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, errTopicAuthorization
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r
	case *kmsg.DescribeGroupsRequest:
		var denied []string
		b.Groups, denied = splitBy(b.Groups, func(g string) bool { return groupOK(g, PermAny) })
		r := s.describeGroupsHere(b).(*kmsg.DescribeGroupsResponse)
		for _, g := range denied {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group, rg.ErrorCode, rg.AuthorizedOperations = g, errGroupAuthorization, -2147483648
			r.Groups = append(r.Groups, rg)
		}
		return r
	case *kmsg.ListGroupsRequest:
		r := s.listGroupsHere(b).(*kmsg.ListGroupsResponse)
		r.Groups, _ = splitBy(r.Groups, func(g kmsg.ListGroupsResponseGroup) bool { return groupOK(g.Group, PermAny) })
		return r
	case *kmsg.CreateTopicsRequest, *kmsg.DeleteTopicsRequest, *kmsg.CreatePartitionsRequest, *kmsg.DeleteRecordsRequest,
		*kmsg.AlterConfigsRequest, *kmsg.IncrementalAlterConfigsRequest, *kmsg.DeleteGroupsRequest,
		*kmsg.ElectLeadersRequest, *kmsg.AlterPartitionAssignmentsRequest, *kmsg.ListPartitionReassignmentsRequest,
		*kmsg.DescribeACLsRequest, *kmsg.CreateACLsRequest, *kmsg.DeleteACLsRequest,
		*kmsg.DescribeUserSCRAMCredentialsRequest, *kmsg.AlterUserSCRAMCredentialsRequest,
		*kmsg.DescribeClientQuotasRequest, *kmsg.AlterClientQuotasRequest:
		if !acct.acc.Admin(acct.user) {
			return adminDenied(req.body)
		}
	}
	return s.handle(req)
}

// splitBy splits xs into those ok keeps and the rest, in order.
func splitBy[T any](xs []T, ok func(T) bool) (kept, rest []T) {
	kept = xs[:0:0]
	for _, x := range xs {
		if ok(x) {
			kept = append(kept, x)
		} else {
			rest = append(rest, x)
		}
	}
	return kept, rest
}

func (s *Server) authorizedMetadata(acct principal, b *kmsg.MetadataRequest) kmsg.Response {
	var denied, unknown []string
	all := b.Topics == nil || b.Version == 0 && len(b.Topics) == 0
	if !all {
		b.Topics, _ = splitBy(b.Topics, func(t kmsg.MetadataRequestTopic) bool {
			if t.Topic == nil {
				return true // by id: answered unknown
			}
			switch _, exists := s.core.Topic(*t.Topic); {
			case !acct.MayTopic(*t.Topic, PermAny):
				denied = append(denied, *t.Topic)
				return false
			case !exists && !acct.MayTopic(*t.Topic, PermPub):
				unknown = append(unknown, *t.Topic) // creating it needs PUB
				return false
			}
			return true
		})
		if len(b.Topics) == 0 && (len(denied) > 0 || len(unknown) > 0) && b.Version == 0 {
			b.Topics = []kmsg.MetadataRequestTopic{} // v0 reads an empty list as all topics
		}
	}
	r := s.metadata(b).(*kmsg.MetadataResponse)
	if all {
		r.Topics, _ = splitBy(r.Topics, func(t kmsg.MetadataResponseTopic) bool { return t.Topic != nil && acct.MayTopic(*t.Topic, PermAny) })
	} else if b.Version == 0 && len(b.Topics) == 0 {
		r.Topics = r.Topics[:0]
	}
	for _, names := range []struct {
		list []string
		code int16
	}{{denied, errTopicAuthorization}, {unknown, errUnknownTopicOrPartition}} {
		for _, name := range names.list {
			rt := kmsg.NewMetadataResponseTopic()
			rt.Topic, rt.ErrorCode = kmsg.StringPtr(name), names.code
			r.Topics = append(r.Topics, rt)
		}
	}
	return r
}

// coordinatorDenied answers a FindCoordinator naming a group the account
// may not see: GROUP_AUTHORIZATION_FAILED for it, this broker for the
// others.
func (s *Server) coordinatorDenied(b *kmsg.FindCoordinatorRequest, keys []string, groupOK func(string, Perm) bool) kmsg.Response {
	r := s.findCoordinator(b).(*kmsg.FindCoordinatorResponse)
	if b.Version < 4 {
		r.ErrorCode, r.NodeID, r.Host, r.Port = errGroupAuthorization, -1, "", -1
		return r
	}
	for i := range r.Coordinators {
		if c := &r.Coordinators[i]; !groupOK(c.Key, PermAny) {
			c.ErrorCode, c.NodeID, c.Host, c.Port = errGroupAuthorization, -1, "", -1
		}
	}
	return r
}

// adminDenied answers an admin request of an account that is not an
// admin: every topic, partition, group or resource denied.
func adminDenied(body kmsg.Request) kmsg.Response {
	msg := kmsg.StringPtr("this needs an admin account (admin: true in plain_acl.yml)")
	switch b := body.(type) {
	case *kmsg.CreateTopicsRequest:
		r := b.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, t := range b.Topics {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic, rt.ErrorCode, rt.ErrorMessage, rt.NumPartitions, rt.ReplicationFactor = t.Topic, errTopicAuthorization, msg, -1, -1
			r.Topics = append(r.Topics, rt)
		}
		return r
	case *kmsg.DeleteTopicsRequest:
		r := b.ResponseKind().(*kmsg.DeleteTopicsResponse)
		names := b.TopicNames
		for _, t := range b.Topics {
			if t.Topic != nil {
				names = append(names, *t.Topic)
			}
		}
		for _, n := range names {
			rt := kmsg.NewDeleteTopicsResponseTopic()
			rt.Topic, rt.ErrorCode, rt.ErrorMessage = kmsg.StringPtr(n), errTopicAuthorization, msg
			r.Topics = append(r.Topics, rt)
		}
		return r
	case *kmsg.CreatePartitionsRequest:
		r := b.ResponseKind().(*kmsg.CreatePartitionsResponse)
		for _, t := range b.Topics {
			rt := kmsg.NewCreatePartitionsResponseTopic()
			rt.Topic, rt.ErrorCode, rt.ErrorMessage = t.Topic, errTopicAuthorization, msg
			r.Topics = append(r.Topics, rt)
		}
		return r
	case *kmsg.DeleteRecordsRequest:
		r := b.ResponseKind().(*kmsg.DeleteRecordsResponse)
		for _, t := range b.Topics {
			rt := kmsg.NewDeleteRecordsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewDeleteRecordsResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.LowWatermark = p.Partition, errTopicAuthorization, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r
	case *kmsg.AlterConfigsRequest:
		r := b.ResponseKind().(*kmsg.AlterConfigsResponse)
		for _, res := range b.Resources {
			rr := kmsg.NewAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode, rr.ErrorMessage = res.ResourceType, res.ResourceName, resourceDenied(res.ResourceType), msg
			r.Resources = append(r.Resources, rr)
		}
		return r
	case *kmsg.IncrementalAlterConfigsRequest:
		r := b.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
		for _, res := range b.Resources {
			rr := kmsg.NewIncrementalAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode, rr.ErrorMessage = res.ResourceType, res.ResourceName, resourceDenied(res.ResourceType), msg
			r.Resources = append(r.Resources, rr)
		}
		return r
	case *kmsg.DeleteGroupsRequest:
		r := b.ResponseKind().(*kmsg.DeleteGroupsResponse)
		for _, g := range b.Groups {
			rg := kmsg.NewDeleteGroupsResponseGroup()
			rg.Group, rg.ErrorCode = g, errGroupAuthorization
			r.Groups = append(r.Groups, rg)
		}
		return r
	}
	return clusterDenied(body, msg)
}

func resourceDenied(t kmsg.ConfigResourceType) int16 {
	if t == resourceTopic {
		return errTopicAuthorization
	}
	return errClusterAuthorization
}
