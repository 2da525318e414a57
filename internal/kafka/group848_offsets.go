package kafka

// Offsets of consumer groups (KIP-848) and the newer OffsetFetch
// versions. A consumer group's offsets are the broker's committed offsets
// like any group's (offsets.go): only the checks differ.
//
// OffsetCommit v9 carries the member epoch in the generation field. To a
// consumer group with members, a commit must name a member
// (UNKNOWN_MEMBER_ID), at v9 or above (UNSUPPORTED_VERSION); a partition
// is committed only if the member owns it (assigned, or being revoked)
// and the commit's epoch lies between the epoch at which the member got
// it and the member's epoch, else STALE_MEMBER_EPOCH: Kafka's assignment
// epochs (KIP-1251), so a commit that crossed a heartbeat is not refused
// for partitions the member still owns, and a member's commit of a
// partition it gave up is. An empty consumer group takes commits without
// a member (-1).
//
// Version 10 of both names topics by id: the ids are mapped to the names
// of the cluster's topics (ids are derived from names, metadata.go) and
// the request served as v9 (OffsetCommit) or per group as v7
// (OffsetFetch), with the access checks of those; an id no topic has is
// UNKNOWN_TOPIC_ID.
//
// OffsetFetch v8+ names several groups: each is answered as an OffsetFetch
// of one group would be, with its own error code. At v9 a member of a
// consumer group is checked: an unknown member is UNKNOWN_MEMBER_ID, an
// epoch above the member's STALE_MEMBER_EPOCH; an older epoch reads (a
// fetch changes nothing, and its epoch may be passed by a heartbeat in
// flight).

import "github.com/twmb/franz-go/pkg/kmsg"

// topicNamesByID maps the ids of the cluster's topics to their names.
func (s *Server) topicNamesByID() map[[16]byte]string {
	names := topicView{s: s, cs: s.cluster(false)}.names()
	out := make(map[[16]byte]string, len(names))
	for _, name := range names {
		out[topicID(name)] = name
	}
	return out
}

// offsetCommitByID serves an OffsetCommit v10: its topics named, as a v9
// request through commit (with or without the access checks), the answer
// given back at v10 with the topics' ids.
func (s *Server) offsetCommitByID(req *kmsg.OffsetCommitRequest, commit func(*kmsg.OffsetCommitRequest) kmsg.Response) kmsg.Response {
	names := s.topicNamesByID()
	named := *req
	named.Version, named.Topics = 9, nil
	var unknown []kmsg.OffsetCommitRequestTopic
	for _, t := range req.Topics {
		if name, ok := names[t.TopicID]; ok {
			t.Topic = name
			named.Topics = append(named.Topics, t)
		} else {
			unknown = append(unknown, t)
		}
	}
	resp := commit(&named).(*kmsg.OffsetCommitResponse)
	resp.SetVersion(req.Version)
	for i := range resp.Topics {
		resp.Topics[i].TopicID = topicID(resp.Topics[i].Topic)
	}
	for _, t := range unknown {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.TopicID = t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, errUnknownTopicID
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// consumerCommitCheck decides, for a commit to a consumer group with
// members, the code of each partition of req; nil when the group is not
// one (the classic checks apply).
func (s *Server) consumerCommitCheck(req *kmsg.OffsetCommitRequest) func(topic string, p int32) int16 {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	g := s.cg.groups[req.Group]
	if g == nil || len(g.members) == 0 {
		return nil
	}
	all := func(code int16) func(string, int32) int16 {
		return func(string, int32) int16 { return code }
	}
	m := g.members[req.MemberID]
	switch {
	case m == nil:
		return all(errUnknownMemberID)
	case req.Version < 9:
		return all(errUnsupportedVersion)
	case req.Generation > m.epoch:
		return all(errStaleMemberEpoch)
	}
	codes := map[tpKey]int16{}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			k := tpKey{t.Topic, p.Partition}
			e, ok := m.assigned[k]
			if !ok {
				e, ok = m.revoking[k]
			}
			if !ok || e > req.Generation {
				codes[k] = errStaleMemberEpoch
			}
		}
	}
	return func(topic string, p int32) int16 { return codes[tpKey{topic, p}] }
}

// checkFetchMember checks the member of a v9+ OffsetFetch group. gmu is
// taken.
func (s *Server) checkFetchMember(rg *kmsg.OffsetFetchRequestGroup) int16 {
	if rg.MemberID == nil && rg.MemberEpoch < 0 {
		return errNone
	}
	s.gmu.Lock()
	defer s.gmu.Unlock()
	g := s.cg.groups[rg.Group]
	if g == nil || len(g.members) == 0 {
		return errNone
	}
	m := g.members[deref(rg.MemberID)]
	switch {
	case m == nil:
		return errUnknownMemberID
	case rg.MemberEpoch > m.epoch:
		return errStaleMemberEpoch
	}
	return errNone
}

// offsetFetchGroups answers an OffsetFetch v8+: each group by one (a v7
// request of that group) through fetchOne, which the caller chooses (with
// or without the access checks).
func (s *Server) offsetFetchGroups(req *kmsg.OffsetFetchRequest, fetchOne func(*kmsg.OffsetFetchRequest) kmsg.Response) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	var names map[[16]byte]string
	if req.Version >= 10 {
		names = s.topicNamesByID()
	}
	for i := range req.Groups {
		rg := &req.Groups[i]
		out := kmsg.NewOffsetFetchResponseGroup()
		out.Group = rg.Group
		if out.ErrorCode = s.checkFetchMember(rg); out.ErrorCode != errNone {
			resp.Groups = append(resp.Groups, out)
			continue
		}
		one := kmsg.NewPtrOffsetFetchRequest()
		one.Version, one.Group, one.RequireStable = 7, rg.Group, req.RequireStable
		var unknown []kmsg.OffsetFetchRequestGroupTopic
		if rg.Topics != nil {
			one.Topics = make([]kmsg.OffsetFetchRequestTopic, 0, len(rg.Topics))
			for _, t := range rg.Topics {
				if names != nil {
					name, ok := names[t.TopicID]
					if !ok {
						unknown = append(unknown, t)
						continue
					}
					t.Topic = name
				}
				one.Topics = append(one.Topics, kmsg.OffsetFetchRequestTopic{Topic: t.Topic, Partitions: t.Partitions})
			}
		}
		r := fetchOne(one).(*kmsg.OffsetFetchResponse)
		out.ErrorCode = r.ErrorCode
		for _, t := range unknown {
			ot := kmsg.NewOffsetFetchResponseGroupTopic()
			ot.TopicID = t.TopicID
			for _, p := range t.Partitions {
				op := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				op.Partition, op.Offset, op.ErrorCode = p, -1, errUnknownTopicID
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		for _, t := range r.Topics {
			ot := kmsg.NewOffsetFetchResponseGroupTopic()
			ot.Topic, ot.TopicID = t.Topic, topicID(t.Topic)
			for _, p := range t.Partitions {
				op := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				op.Partition, op.Offset, op.LeaderEpoch, op.Metadata, op.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
				ot.Partitions = append(ot.Partitions, op)
			}
			out.Topics = append(out.Topics, ot)
		}
		resp.Groups = append(resp.Groups, out)
	}
	return resp
}
