package kafka

// Leader epochs and OffsetForLeaderEpoch (KIP-101, KIP-320). A
// partition's leader epoch is its group's replication epoch (cluster.go);
// the replication keeps, on a master, the history of its group's epochs,
// each with the CommitLog offset it started writing at
// (Config.EpochHistory). A batch produced here carries the leader's
// current epoch as its partitionLeaderEpoch (0 when the epoch is unknown:
// a broker alone, or without replication), so a consumer knows the epoch
// of every record it read. OffsetForLeaderEpoch answers, for a
// partition and an epoch E, Kafka's end offset of E: the largest epoch of
// the history <= E and the partition's first offset written by a later
// epoch (the first queue entry at or past that epoch's CommitLog start),
// or the high watermark when E is the current epoch. A consumer that read
// past that offset under E (its leader lost what it read: the group
// failed over to a slave that lacked it) sees it and resets; one that did
// not goes on. Epoch 0 is never a replication epoch: records stamped 0
// (written before epochs were stamped, converted from another protocol,
// or by a broker that knows no epoch) are answered with epoch 0 and the
// high watermark, which claims no truncation. Only the partition's leader
// answers (others: NOT_LEADER_OR_FOLLOWER); CurrentLeaderEpoch (v2+) is
// checked as Fetch checks it.

import (
	"sort"

	"github.com/keelmq/keel/internal/store"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EpochStart is one epoch of a master's history: the CommitLog offset
// its writes started at.
type EpochStart struct {
	Epoch int32
	Start int64
}

// writeEpoch is the leader epoch produced batches carry: the history's
// last epoch with a cluster, else 0.
func (s *Server) writeEpoch() int32 {
	if s.cfg.Cluster == nil || s.cfg.EpochHistory == nil {
		return 0
	}
	h := s.cfg.EpochHistory()
	if len(h) == 0 || h[len(h)-1].Epoch < 0 {
		return 0
	}
	return h[len(h)-1].Epoch
}

func (s *Server) offsetForLeaderEpoch(req *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	cs := s.cluster(false)
	current := s.localEpoch()
	var hist []EpochStart
	if s.cfg.Cluster != nil && s.cfg.EpochHistory != nil {
		hist = s.cfg.EpochHistory()
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition, rp.LeaderEpoch, rp.EndOffset = p.Partition, -1, -1
			q, code := s.localQueue(cs, t.Topic, p.Partition)
			if code == errNone {
				code = s.checkRead(t.Topic, q)
			}
			if code == errNone && req.Version >= 2 {
				code = checkLeaderEpoch(p.CurrentLeaderEpoch, current)
			}
			if code == errNone {
				rp.LeaderEpoch, rp.EndOffset, code = s.epochEnd(t.Topic, q, p.LeaderEpoch, hist)
			}
			rp.ErrorCode = code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// epochEnd is Kafka's end offset of epoch e on queue q of topic, from
// the history hist (Kafka's LeaderEpochFileCache.endOffsetFor).
func (s *Server) epochEnd(topic string, q, e int32, hist []EpochStart) (int32, int64, int16) {
	_, hw, err := s.partitionBounds(topic, s.parts.get(topic, q))
	if err != nil {
		s.log.Error("kafka: offset for leader epoch", "topic", topic, "queue_id", q, "err", err)
		return -1, -1, errKafkaStorage
	}
	switch {
	case e < 0:
		return -1, -1, errNone
	case e == 0 || len(hist) == 0:
		// No epoch known for such records: nothing was truncated.
		return e, hw, errNone
	case e == hist[len(hist)-1].Epoch:
		return e, hw, errNone
	}
	// The first epoch above e.
	i := sort.Search(len(hist), func(i int) bool { return hist[i].Epoch > e })
	if i == len(hist) {
		return -1, -1, errNone // newer than any epoch known
	}
	end, err := s.queueOffsetAt(topic, q, hist[i].Start)
	if err != nil {
		s.log.Error("kafka: offset for leader epoch", "topic", topic, "queue_id", q, "err", err)
		return -1, -1, errKafkaStorage
	}
	end = min(end, hw) // never an offset past what is served
	if i == 0 {
		return e, end, errNone // older than every epoch
	}
	return hist[i-1].Epoch, end, errNone
}

// queueOffsetAt is the first offset of queue q of topic whose entry is at
// or past CommitLog offset phys (the queue's end if none; its start if
// the entries before it are gone).
func (s *Server) queueOffsetAt(topic string, q int32, phys int64) (int64, error) {
	lo, hi := s.st.MinOffset(topic, q), s.st.MaxOffset(topic, q)
	var e [1]store.QueueEntry
	for lo < hi {
		mid := lo + (hi-lo)/2
		n, err := s.st.QueueEntries(topic, q, mid, e[:])
		if err != nil {
			return 0, err
		}
		if n == 0 || e[0].PhysOffset >= phys {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}
