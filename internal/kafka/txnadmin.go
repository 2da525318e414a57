package kafka

// The transaction admin requests that kafka-transactions.sh and the admin
// clients send to find and inspect transactions (KIP-664):
//
//	ListTransactions (66, v0–1)     the transactional ids this broker
//	                                coordinates, by state, producer id and
//	                                (v1) how long they have been open
//	DescribeTransactions (65, v0)   one id's state, producer, timeout, start
//	                                and partitions (TRANSACTIONAL_ID_NOT_FOUND
//	                                for an id it does not know)
//	DescribeProducers (61, v0)      the idempotent and transactional
//	                                producers a partition remembers, with
//	                                their last sequence and, for one in an
//	                                open transaction, its first offset
//
// Every broker coordinates the transactions begun on it (coordinator.go),
// so the first two answer from this broker's coordinator and the admin
// clients ask each broker. Under access control (authz.go) a transaction
// id is not a resource, so any account may list and describe them; the
// topics of a description and DescribeProducers' partitions need PUB or
// SUB on the topic, as ListOffsets.

import (
	"cmp"
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const errTransactionalIDNotFound int16 = 105

func (s *Server) listTransactions(req *kmsg.ListTransactionsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	if code := s.txnReady(); code != errNone {
		resp.ErrorCode = code
		return resp
	}
	states := map[string]bool{}
	for _, f := range req.StateFilters {
		if _, ok := txnStateNamed(f); ok {
			states[f] = true
		} else {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, f)
		}
	}
	nowMs := s.parts.now().UnixMilli()
	for _, e := range s.txnEntries() {
		switch {
		case len(req.StateFilters) > 0 && !states[e.State.String()],
			len(req.ProducerIDFilters) > 0 && !slices.Contains(req.ProducerIDFilters, e.PID),
			req.Version >= 1 && req.DurationFilterMillis >= 0 && (!e.State.open() || nowMs-e.StartMs < req.DurationFilterMillis):
			continue
		}
		st := kmsg.NewListTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.TransactionState = e.ID, e.PID, e.State.String()
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp
}

func (s *Server) describeTransactions(req *kmsg.DescribeTransactionsRequest, topicOK func(string) bool) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	ready := s.txnReady()
	for _, id := range req.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID, st.StartTimestamp, st.ProducerID, st.ProducerEpoch = id, -1, -1, -1
		var e *txnEntry
		if ready == errNone {
			e = s.txn.entry(s.txn.existing(id))
		}
		switch {
		case ready != errNone:
			st.ErrorCode = ready
		case e == nil:
			st.ErrorCode = errTransactionalIDNotFound
		default:
			st.State, st.TimeoutMillis, st.ProducerID, st.ProducerEpoch = e.State.String(), e.TimeoutMs, e.PID, e.Epoch
			if e.State.open() {
				st.StartTimestamp = e.StartMs
			}
			for _, p := range e.Parts {
				if !topicOK(p.Topic) {
					continue
				}
				i := slices.IndexFunc(st.Topics, func(t kmsg.DescribeTransactionsResponseTransactionStateTopic) bool { return t.Topic == p.Topic })
				if i < 0 {
					t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
					t.Topic = p.Topic
					st.Topics, i = append(st.Topics, t), len(st.Topics)
				}
				st.Topics[i].Partitions = append(st.Topics[i].Partitions, p.Partition)
			}
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp
}

// txnEntries is a copy of every transactional id's entry, by id.
func (s *Server) txnEntries() []*txnEntry {
	c := s.txn
	c.mu.Lock()
	out := make([]*txnEntry, 0, len(c.byID))
	for _, sl := range c.byID {
		if sl.e != nil {
			out = append(out, sl.e.clone())
		}
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b *txnEntry) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func txnStateNamed(name string) (txnState, bool) {
	for t := txnEmpty; t <= txnCompleteAbort; t++ {
		if t.String() == name {
			return t, true
		}
	}
	return 0, false
}

func (s *Server) describeProducers(req *kmsg.DescribeProducersRequest, topicOK func(string) bool) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	cs := s.cluster(false)
	for _, t := range req.Topics {
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition = p
			q, code := s.localQueue(cs, t.Topic, p)
			if code == errNone && !topicOK(t.Topic) {
				code = errTopicAuthorization
			}
			if code == errNone {
				code = s.checkRead(t.Topic, q)
			}
			if code == errNone {
				rp.ActiveProducers, code, rp.ErrorMessage = s.activeProducers(t.Topic, q)
			}
			rp.ErrorCode = code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// activeProducers are the producers partition (topic, queue) remembers,
// by producer id.
func (s *Server) activeProducers(topic string, queue int32) ([]kmsg.DescribeProducersResponseTopicPartitionActiveProducer, int16, *string) {
	part := s.parts.get(topic, queue)
	part.appendMu.Lock()
	err := s.parts.loadProducers(part)
	var out []kmsg.DescribeProducersResponseTopicPartitionActiveProducer
	nowMs := s.parts.now().UnixMilli()
	for pid, st := range part.producers {
		if len(st.batches) == 0 || nowMs-st.lastMs > s.parts.lim.expireMs {
			continue
		}
		ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
		ap.ProducerID, ap.ProducerEpoch = pid, int32(st.epoch)
		ap.LastSequence, ap.LastTimestamp = st.batches[len(st.batches)-1].last, st.lastMs
		ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = -1, -1
		out = append(out, ap)
	}
	part.appendMu.Unlock()
	if err != nil {
		if errors.Is(err, errProducersNotLoaded) { // as Produce answers then (retriable)
			return nil, errNotEnoughReplicas, kmsg.StringPtr(err.Error())
		}
		s.log.Error("kafka: describe producers", "topic", topic, "queue_id", queue, "err", err)
		return nil, errKafkaStorage, nil
	}
	c := s.txn
	c.mu.Lock()
	open := c.open[queueKey{topic, queue}]
	for i := range out {
		if start, ok := open[out[i].ProducerID]; ok {
			out[i].CurrentTxnStartOffset = start
		}
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b kmsg.DescribeProducersResponseTopicPartitionActiveProducer) int {
		return cmp.Compare(a.ProducerID, b.ProducerID)
	})
	return out, errNone, nil
}
