package kafka

// Access control of the transaction requests (authz.go): a
// transactional id is not a resource of plain_acl.yml, so any
// authenticated account may use one (as InitProducerId) and list and
// describe them (txnadmin.go: a description's topics and DescribeProducers'
// partitions need PUB or SUB on the topic); the partitions
// a transaction adds need PUB on their topic, the group of
// AddOffsetsToTxn and TxnOffsetCommit SUB, and the topics of
// TxnOffsetCommit SUB, as OffsetCommit.

import "github.com/twmb/franz-go/pkg/kmsg"

// authorizedTxn answers a transaction request acct may not make in full;
// ok false lets it be served.
func (s *Server) authorizedTxn(acct principal, body kmsg.Request) (kmsg.Response, bool) {
	readable := func(t string) bool { return acct.MayTopic(t, PermPub) || acct.MayTopic(t, PermSub) }
	switch b := body.(type) {
	case *kmsg.DescribeTransactionsRequest: // txnadmin.go
		return s.describeTransactions(b, readable), true
	case *kmsg.DescribeProducersRequest:
		return s.describeProducers(b, readable), true
	case *kmsg.AddPartitionsToTxnRequest:
		denied := false
		for _, t := range b.Topics {
			denied = denied || !acct.MayTopic(t.Topic, PermPub)
		}
		if !denied {
			return nil, false
		}
		// As Kafka: nothing is added, the permitted partitions answered
		// OPERATION_NOT_ATTEMPTED.
		r := b.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		for _, t := range b.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			code := errOperationNotAttempted
			if !acct.MayTopic(t.Topic, PermPub) {
				code = errTopicAuthorization
			}
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r, true
	case *kmsg.AddOffsetsToTxnRequest:
		if acct.MayGroup(b.Group, PermSub) {
			return nil, false
		}
		r := b.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		r.ErrorCode = errGroupAuthorization
		return r, true
	case *kmsg.TxnOffsetCommitRequest:
		groupDenied := !acct.MayGroup(b.Group, PermSub)
		var denied []kmsg.TxnOffsetCommitRequestTopic
		b.Topics, denied = splitBy(b.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) bool {
			return !groupDenied && acct.MayTopic(t.Topic, PermSub)
		})
		var r *kmsg.TxnOffsetCommitResponse
		if len(b.Topics) > 0 {
			r = s.txnOffsetCommit(b).(*kmsg.TxnOffsetCommitResponse)
		} else {
			r = b.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		}
		for _, t := range denied {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, errTopicAuthorization
				if groupDenied {
					rp.ErrorCode = errGroupAuthorization
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r, true
	}
	return nil, false
}
