package kafka

// Fetch: for each partition, the batch holding the fetch offset (the
// record entry FetchOffset locates) and the ones after it, as stored (the
// envelope's body: no re-encoding; the first batch may start before the
// fetch offset, and clients skip what they did not ask for), up to the
// partition's max bytes and the response's MaxBytes (at most
// Config.MaxFetchBytes, whatever the client asks), always at least one
// batch in the response so that a batch larger than the limits still
// moves the consumer (a partition reached once the response is full is
// answered with its offsets and no records). Never past the high
// watermark: the store shows only visible entries, and visible never
// passes Confirmed. LastStableOffset is the high watermark but for open
// transactions (txnmarker.go); with isolation_level read_committed (1)
// only batches below it are served, with the aborted transactions of the
// range; fetch sessions are not kept (SessionID 0: clients send full fetches).
// While the response holds fewer than MinBytes (at least 1) and
// MaxWaitMillis > 0, the request waits through
// the core's Hold, one wait per partition sharing one wake-up, for the
// dispatcher to add an entry or the wait to pass (at most Config.MaxWait),
// then reads again.
// Entries of other protocols (RocketMQ and AMQP messages) are converted,
// each at its queue offset, consecutive ones into one batch.

import (
	"cmp"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/translate"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// checkRead checks that partition p of topic may be read: the topic
// exists and is readable and p is one of its read queues. (The core's
// CheckRead also wants a consumer group, which a Kafka fetch does not
// name.)
func (s *Server) checkRead(topic string, p int32) int16 {
	tc, ok := s.core.Topic(topic)
	switch {
	case !ok || p < 0 || p >= tc.ReadQueueNums:
		return errUnknownTopicOrPartition
	case !tc.Readable():
		return errTopicAuthorization
	}
	return errNone
}

func (s *Server) fetch(req *kmsg.FetchRequest) kmsg.Response {
	wait := time.Duration(req.MaxWaitMillis) * time.Millisecond
	if wait > s.cfg.MaxWait {
		wait = s.cfg.MaxWait
	}
	deadline := time.Now().Add(wait)
	for {
		resp, bytes, waits := s.fetchOnce(req)
		if bytes > 0 && bytes >= int(req.MinBytes) || len(waits) == 0 || time.Until(deadline) <= 0 ||
			!s.waitAny(waits, time.Until(deadline)) {
			s.observeFetch(req, resp)
			if failedFetch(resp) {
				s.cfg.Traffic.Error()
			}
			return resp
		}
	}
}

// fetchOnce reads every partition once; waits are the readable queues
// (with the entry count they had), to wait on while the response holds
// fewer than MinBytes.
func (s *Server) fetchOnce(req *kmsg.FetchRequest) (*kmsg.FetchResponse, int, []core.Wait) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	budget := int(req.MaxBytes)
	if budget <= 0 {
		budget = 50 << 20
	}
	budget = min(budget, s.cfg.MaxFetchBytes)
	total := 0
	var waits []core.Wait
	cs := s.cluster(false)
	// Every partition here is this group's: one answer. A read_committed
	// fetch reads the leader (txnmarker.go's servesCommitted).
	reader := int32(-1)
	if req.Version >= 11 && req.IsolationLevel != 1 {
		reader = cs.preferredReader(req.Rack)
	}
	epoch := int32(-1)
	if req.Version >= 9 { // CurrentLeaderEpoch is in the request
		epoch = s.localEpoch()
	}
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = p.Partition
			limit := min(int(p.PartitionMaxBytes), budget-total)
			if total == 0 && limit <= 0 {
				limit = 1 // at least one batch in the response
			}
			q, code := s.fetchQueue(cs, t.Topic, p.Partition)
			if code == errNone && req.Version >= 9 {
				code = checkLeaderEpoch(p.CurrentLeaderEpoch, epoch)
			}
			if code == errNone && req.IsolationLevel == 1 && !s.servesCommitted() {
				code = errNotLeaderOrFollower // txnmarker.go
			}
			if code != errNone {
				rp.ErrorCode, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = code, -1, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			p.Partition = q // this broker's queue from here on
			if reader >= 0 {
				limit = 0 // the client reads from the slave (follower.go)
			}
			entries := s.fetchPartition(t.Topic, p, limit, req.IsolationLevel == 1, &rp)
			if reader >= 0 && rp.ErrorCode == errNone {
				rp.PreferredReadReplica, entries = reader, -1
			}
			rp.Partition = t.Partitions[len(rt.Partitions)].Partition // the client's number
			total += len(rp.RecordBatches)
			// Every readable partition is waited on, those that answered
			// records too: a response below MinBytes waits for more.
			if rp.ErrorCode == errNone && entries >= 0 {
				waits = append(waits, core.Wait{Topic: t.Topic, QueueID: p.Partition, Offset: entries})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, total, waits
}

// fetchPartition fills rp; it returns the queue's entry count (-1 on an
// error).
func (s *Server) fetchPartition(topic string, p kmsg.FetchRequestTopicPartition, limit int, committed bool, rp *kmsg.FetchResponseTopicPartition) int64 {
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
	// Empty, not null: librdkafka refuses a null record set (size -1).
	rp.RecordBatches = []byte{}
	rp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
	if rp.ErrorCode = s.checkRead(topic, p.Partition); rp.ErrorCode != errNone {
		return -1
	}
	part := s.parts.get(topic, p.Partition)
	entries := s.st.MaxOffset(topic, p.Partition)
	start, hwm, err := s.partitionBounds(topic, part)
	if err != nil {
		s.log.Error("kafka: fetch: offsets", "topic", topic, "queue_id", p.Partition, "err", err)
		rp.ErrorCode = errKafkaStorage
		return -1
	}
	lso := s.lastStable(part, hwm)
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = hwm, lso, start
	// Nothing at or past the high watermark this response reports is
	// served: the dispatcher adds a batch's entries one by one, so a read
	// may see a batch's first entry before its last, and a client handed
	// that whole batch would fetch next past the high watermark (and be
	// told OFFSET_OUT_OF_RANGE).
	stop := hwm // read_uncommitted
	if committed {
		stop = min(lso, hwm)
	}
	switch {
	case p.FetchOffset > hwm && s.cfg.Follower:
		rp.ErrorCode = errOffsetNotAvailable // the master may have it: retried (follower.go)
		return -1
	case p.FetchOffset < rp.LogStartOffset || p.FetchOffset > hwm:
		rp.ErrorCode = errOffsetOutOfRange
		return -1
	case p.FetchOffset == hwm, p.FetchOffset >= stop:
		return entries
	case limit <= 0:
		return entries // the response is full: the next fetch reads this partition
	}
	if committed {
		rp.AbortedTransactions = s.abortedIn(part, p.FetchOffset, lso)
	}
	off, full, err := s.compact.read(part.key, p.FetchOffset, limit, rp) // compact.go: below the cleaned point
	if err == nil && !full {
		err = s.readBatches(part, off, stop, limit, rp)
	}
	if err != nil {
		s.log.Error("kafka: fetch: read", "topic", topic, "queue_id", p.Partition, "offset", p.FetchOffset, "err", err)
		rp.ErrorCode = errKafkaStorage
		return -1
	}
	return entries
}

// readBatches appends what the queue holds from entry off: each Kafka
// batch as stored (the one holding off may start before it), other
// protocols' messages converted, and after a batch goes on at the entry
// after its last record (its other entries locate the same record); it
// serves nothing at or after entry stop (the high watermark, or a
// read_committed fetch's LSO), and no batch that ends after it.
func (s *Server) readBatches(part *partition, off, stop int64, limit int, rp *kmsg.FetchResponseTopicPartition) error {
	k := part.key
	idx := off                       // the next entry not served
	var w translate.KafkaBatchWriter // other protocols' records, converted
	defer func() { rp.RecordBatches = w.Close(rp.RecordBatches) }()
	for len(rp.RecordBatches) == 0 || len(rp.RecordBatches) < limit {
		r, err := s.st.GetMessage(k.topic, k.queueID, idx, 64, max(limit-len(rp.RecordBatches), 1), nil)
		if err != nil {
			return err
		}
		if r.Status == store.OffsetTooSmall && r.NextOffset > idx { // retention passed off meanwhile
			idx = r.NextOffset
			r.Release()
			continue
		}
		if r.Status != store.Found {
			r.Release()
			return nil
		}
		full := false
		for _, rec := range r.Records {
			b, err := kafkaView(rec, k)
			if err != nil || b.old {
				r.Release()
				return cmp.Or(err, errOldFormat)
			}
			if b.ok {
				if b.end <= idx {
					continue // another entry of a batch already served
				}
				if b.base >= stop || b.end > stop {
					full = true
					break
				}
				body := rec[len(rec)-b.bodyLen:]
				if len(rp.RecordBatches) > 0 && len(rp.RecordBatches)+len(body) > limit {
					full = true
					break
				}
				rp.RecordBatches = append(w.Close(rp.RecordBatches), body...)
				idx = b.end
				continue
			}
			qo, ok := translate.QueueOffset(rec, k.topic, k.queueID)
			if !ok || qo < idx {
				continue
			}
			if qo >= stop {
				full = true
				break
			}
			_, isFull, err := s.appendForeign(part, &w, rec, qo, limit, rp)
			if err != nil {
				r.Release()
				return err
			}
			if isFull {
				full = true
				break
			}
			idx = qo + 1
		}
		next := r.NextOffset
		n := len(r.Records)
		r.Release()
		if full || n == 0 && next <= idx {
			return nil
		}
		idx = max(idx, next)
	}
	return nil
}

// appendForeign converts rec, another protocol's message at entry qo,
// into a record at Kafka offset qo, added to the batch w has open when it
// continues it, else to a new one; it reports whether it appended and
// whether the response is full (then nothing was added). A message that
// does not convert is skipped (logged).
func (s *Server) appendForeign(part *partition, w *translate.KafkaBatchWriter, rec []byte, qo int64, limit int, rp *kmsg.FetchResponseTopicPartition) (appended, full bool, err error) {
	k := part.key
	r, err := translate.KafkaRecordOf(rec, qo, translate.DefaultLimit)
	if err != nil {
		s.log.Error("kafka: fetch: a record of another protocol does not convert; skipped", "topic", k.topic, "queue_id", k.queueID, "queue_offset", qo, "err", err)
		return false, false, nil
	}
	if w.Open() && w.Next() != qo {
		rp.RecordBatches = w.Close(rp.RecordBatches)
	}
	n, prev := len(rp.RecordBatches), *w
	rp.RecordBatches = w.Append(rp.RecordBatches, &r)
	if n > 0 && len(rp.RecordBatches) > limit {
		rp.RecordBatches, *w = rp.RecordBatches[:n], prev
		return false, true, nil
	}
	return true, false, nil
}

// waitAny parks one wait per queue until any is woken or timeout passes;
// it returns false when the core refuses to hold (closing, or too many
// waits).
func (s *Server) waitAny(waits []core.Wait, timeout time.Duration) bool {
	woken := make(chan struct{})
	var once sync.Once
	w := onceWaker{once: &once, ch: woken}
	held := 0
	for i := range waits {
		waits[i].Waker = w
		if s.core.Hold(&waits[i], timeout) {
			held++
		}
	}
	if held == 0 {
		return false
	}
	select {
	case <-woken:
		return true
	case <-s.ctx.Done():
		return false
	}
}

type onceWaker struct {
	once *sync.Once
	ch   chan struct{}
}

func (w onceWaker) Wake() { w.once.Do(func() { close(w.ch) }) }

// failedFetch reports whether resp answers a partition with an error.
func failedFetch(resp *kmsg.FetchResponse) bool {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != errNone {
				return true
			}
		}
	}
	return resp.ErrorCode != errNone
}
