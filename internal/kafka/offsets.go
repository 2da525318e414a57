package kafka

// OffsetCommit and OffsetFetch over the core's committed offsets, which
// are queue offsets — and Kafka offsets are queue offsets (one entry per
// record), so a Kafka offset is committed as it is, and what disk
// pressure, lag (in records) and RocketMQ consumers of the same group
// read is exact. A commit past the high watermark is stored as it is, as
// Kafka does (a consumer that resumes there gets OFFSET_OUT_OF_RANGE and
// its reset policy; lag is counted from the high watermark). Commit
// metadata is not kept. Offsets are keyed by group name, shared with a
// RocketMQ group of the same name.
//
// Where an offset lives: with its partition. The offset of a partition
// is kept in the consumer-offset table of the broker group hosting the
// partition's queue, under that queue's id (never under the partition
// number), so RocketMQ consumers and `keel group` read the right lag,
// and the offset replicates and fails over with that group's metadata
// (its system records). The coordinator (coordinator.go) commits and
// reads the offsets of its own group's partitions itself, and forwards
// those of other groups' partitions to their master (Config.Peers: one
// request per group and topic, in parallel), which commits them durably
// before it answers. A commit is acknowledged only after every owner
// made it durable (core.FlushOffsets: the offsets file written and, on a
// master serving slaves, the offsets record confirmed).
// Offsets a transaction commits (TxnOffsetCommit, txn.go) are
// committed here when it commits; until then OffsetFetch with
// RequireStable answers UNSTABLE_OFFSET_COMMIT for them.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Peers sends the requests one broker makes of another broker group's
// master, at addr (its RocketMQ address, from the cluster view). cmd/keel
// implements it over the remoting protocol.
type Peers interface {
	// CommitOffsets stores group's committed offsets of topic's queues
	// on that master and returns once they are durable there (written
	// and replicated as its own commits are). An error wrapping
	// core.ErrTopicNotFound: the master does not host the topic.
	CommitOffsets(ctx context.Context, addr, group, topic string, offsets map[int32]int64) error
	// FetchOffsets returns group's committed offsets on that master, as
	// topic -> queue -> offset: of topic's queues, or of every topic
	// when topic is empty.
	FetchOffsets(ctx context.Context, addr, group, topic string) (map[string]map[int32]int64, error)
	// DeleteOffsets drops group's committed offsets of topic's queues
	// on that master, durably.
	DeleteOffsets(ctx context.Context, addr, group, topic string, queues []int32) error
	// CreateTopic creates topic, absent there, with queues queues and the
	// Kafka topic configs attrs (the topic's attributes) on that master
	// (its share of a topic created here, topics.go). An error wrapping
	// ErrTopicExists: it exists there.
	CreateTopic(ctx context.Context, addr, topic string, queues int32, attrs map[string]string) error
	// GrowTopic raises topic's queue count on that master to queues.
	GrowTopic(ctx context.Context, addr, topic string, queues int32) error
	// DeleteTopic deletes topic on that master (undoing a CreateTopic).
	DeleteTopic(ctx context.Context, addr, topic string) error
}

// peerTimeout bounds one forwarded request (a commit waits for the
// owner's replication).
const peerTimeout = 10 * time.Second

// partPlace is where a partition of a request lives.
type partPlace struct {
	group string // broker group; "" with code set
	queue int32
	local bool
	code  int16
}

// place locates partition p of topic for the offsets requests: in this
// group (local, its queue), in another (group, queue), or code. A topic
// the cluster does not know is left to the local checks (p itself).
func (s *Server) place(cs *clusterState, topic string, p int32) partPlace {
	if s.cfg.Cluster == nil {
		return partPlace{queue: p, local: true}
	}
	tc, here := s.core.Topic(topic)
	layout := cs.layout(topic, tc, here)
	if len(layout) == 0 {
		return partPlace{queue: p, local: true}
	}
	g, q, ok := locate(layout, p)
	switch {
	case !ok:
		return partPlace{code: errUnknownTopicOrPartition}
	case g == s.cfg.Group:
		return partPlace{group: g, queue: q, local: true}
	}
	return partPlace{group: g, queue: q}
}

// partitionOf is the partition of group g's queue q of topic (-1: not in
// the layout).
func partitionOf(layout []TopicGroup, g string, q int32) int32 {
	var base int32
	for _, tg := range layout {
		if tg.Group == g {
			if q < 0 || q >= tg.Queues {
				return -1
			}
			return base + q
		}
		base += tg.Queues
	}
	return -1
}

// peerCode is the Kafka code for a forwarded request's failure.
func peerCode(err error) int16 {
	switch {
	case err == nil:
		return errNone
	case errors.Is(err, core.ErrTopicNotFound):
		return errUnknownTopicOrPartition
	}
	return errCoordinatorNotAvailable
}

// groupTopic names one forwarded request: a broker group's master and a
// topic.
type groupTopic struct{ group, topic string }

// maxForwards bounds the forwarded requests of one request in flight at
// once.
const maxForwards = 16

// forward runs call for each key, up to maxForwards at once, and returns
// the error of each; a group without a known master address gets
// errNoPeer.
func (s *Server) forward(cs *clusterState, user string, keys []groupTopic, call func(ctx context.Context, addr string, k groupTopic) error) map[groupTopic]error {
	out := make(map[groupTopic]error, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxForwards)
	for _, k := range keys {
		g := cs.groups[k.group]
		if s.cfg.Peers == nil || g == nil || g.leader < 0 || g.leaderAddr == "" {
			out[k] = errNoPeer
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func(k groupTopic, addr string) {
			defer func() { <-slots; wg.Done() }()
			ctx, cancel := context.WithTimeout(WithPeerUser(s.ctx, user), peerTimeout)
			defer cancel()
			err := call(ctx, addr, k)
			if err != nil {
				s.log.Warn("kafka: offsets request to another group's master failed", "group", k.group, "addr", addr, "topic", k.topic, "err", err)
			}
			mu.Lock()
			out[k] = err
			mu.Unlock()
		}(k, g.leaderAddr)
	}
	wg.Wait()
	return out
}

// ErrTopicExists is what a Peers' CreateTopic wraps when the topic exists
// on that master.
var ErrTopicExists = errors.New("kafka: the topic exists on that broker group")

// peerUserKey carries, in a forwarded request's context, the SASL
// account of the client it is forwarded for (PeerUser).
type peerUserKey struct{}

// PeerUser is the SASL account of the client a Peers request is made for
// ("": none, the connection was not authenticated): a Peers
// implementation signs the request as that account, so the other master
// checks the client's own permissions.
func PeerUser(ctx context.Context) string {
	u, _ := ctx.Value(peerUserKey{}).(string)
	return u
}

// WithPeerUser returns ctx carrying user as the PeerUser of a Peers
// request (for tests of a Peers implementation).
func WithPeerUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, peerUserKey{}, user)
}

var errNoPeer = errors.New("kafka: the group hosting the partition has no known master")

func (s *Server) offsetCommit(req *kmsg.OffsetCommitRequest, user string) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	code := errNone
	if req.Generation >= 0 || req.MemberID != "" {
		s.gmu.Lock()
		if g := s.groups[req.Group]; g != nil && len(g.members) > 0 {
			_, _, code = s.checkMember(req.Group, req.MemberID, req.Generation)
			if fenced := s.checkInstance(req.Group, req.InstanceID, req.MemberID); fenced != errNone {
				code = fenced
			}
			// As Kafka: the current generation may commit while the next
			// rebalance is prepared (cooperative members do), not while
			// its assignment is being decided.
			if code == errNone && g.state == groupCompleting {
				code = errRebalanceInProgress
			}
		}
		s.gmu.Unlock()
	}
	check := s.consumerCommitCheck(req) // a KIP-848 group's member epochs (group848_offsets.go)
	cs := s.cluster(false)
	committed := false
	type slot struct{ t, p int }
	remote := map[groupTopic]map[int32]int64{}
	slots := map[groupTopic][]slot{}
	var keys []groupTopic
	for ti, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for pi, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			if code == errNone && check != nil {
				rp.ErrorCode = check(t.Topic, p.Partition)
			}
			if rp.ErrorCode == errNone {
				switch pl := s.place(cs, t.Topic, p.Partition); {
				case pl.code != errNone:
					rp.ErrorCode = pl.code
				case pl.local:
					rp.ErrorCode = s.commitPartition(req.Group, t.Topic, pl.queue, p.Offset)
					committed = committed || rp.ErrorCode == errNone
				case p.Offset < 0:
					rp.ErrorCode = errOffsetOutOfRange
				default:
					k := groupTopic{pl.group, t.Topic}
					if remote[k] == nil {
						remote[k] = map[int32]int64{}
						keys = append(keys, k)
					}
					remote[k][pl.queue] = p.Offset
					slots[k] = append(slots[k], slot{ti, pi})
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	var flushErr error
	var wg sync.WaitGroup
	if committed {
		wg.Add(1)
		go func() { // beside the forwarded commits
			defer wg.Done()
			flushErr = s.core.FlushOffsets()
		}()
	}
	errs := s.forward(cs, user, keys, func(ctx context.Context, addr string, k groupTopic) error {
		return s.cfg.Peers.CommitOffsets(ctx, addr, req.Group, k.topic, remote[k])
	})
	for k, err := range errs {
		for _, sl := range slots[k] {
			resp.Topics[sl.t].Partitions[sl.p].ErrorCode = peerCode(err)
		}
	}
	wg.Wait()
	if flushErr != nil {
		s.log.Error("kafka: offset commit not durable", "group", req.Group, "err", flushErr)
		for i, t := range req.Topics {
			for j, p := range t.Partitions {
				if pl := s.place(cs, t.Topic, p.Partition); pl.local && resp.Topics[i].Partitions[j].ErrorCode == errNone {
					resp.Topics[i].Partitions[j].ErrorCode = errKafkaStorage
				}
			}
		}
	}
	return resp
}

// commitPartition commits group's offset of this group's queue q.
func (s *Server) commitPartition(group, topic string, q int32, off int64) int16 {
	if code := s.checkRead(topic, q); code != errNone {
		return code
	}
	part := s.parts.get(topic, q)
	if err := s.parts.checkFormat(part); err != nil {
		s.log.Error("kafka: offset commit", "topic", topic, "queue_id", q, "err", err)
		return errKafkaStorage
	}
	if off < 0 {
		return errOffsetOutOfRange
	}
	if err := s.core.CommitOffset(group, topic, q, off); err != nil {
		return coreCode(err)
	}
	return errNone
}

func (s *Server) offsetFetch(req *kmsg.OffsetFetchRequest, user string) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	cs := s.cluster(false)
	if req.Topics == nil {
		return s.offsetFetchAll(cs, req, resp, user)
	}
	type slot struct{ t, p int }
	slots := map[groupTopic][]slot{}
	var keys []groupTopic
	for ti, t := range req.Topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for pi, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
			rp.Metadata = kmsg.StringPtr("")
			switch pl := s.place(cs, t.Topic, p); {
			case pl.code != errNone:
				// As Kafka: a partition without an offset is -1.
			case pl.local:
				if off, ok := s.core.ConsumerOffset(req.Group, t.Topic, pl.queue, false); ok {
					rp.Offset = off
				}
			default:
				k := groupTopic{pl.group, t.Topic}
				if slots[k] == nil {
					keys = append(keys, k)
				}
				slots[k] = append(slots[k], slot{ti, pi})
			}
			if req.RequireStable && s.txnPendingOffset(req.Group, t.Topic, p) {
				rp.ErrorCode = errUnstableOffsetCommit // an open transaction commits it (txn.go)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	got := map[groupTopic]map[int32]int64{}
	var mu sync.Mutex
	errs := s.forward(cs, user, keys, func(ctx context.Context, addr string, k groupTopic) error {
		offs, err := s.cfg.Peers.FetchOffsets(ctx, addr, req.Group, k.topic)
		mu.Lock()
		got[k] = offs[k.topic]
		mu.Unlock()
		return err
	})
	for k, err := range errs {
		if err != nil {
			// The owner did not answer: the group's offsets are not known
			// now; the client asks again.
			return offsetFetchFailed(req, resp, peerCode(err))
		}
		for _, sl := range slots[k] {
			rp := &resp.Topics[sl.t].Partitions[sl.p]
			if pl := s.place(cs, k.topic, rp.Partition); pl.group == k.group {
				if off, ok := got[k][pl.queue]; ok {
					rp.Offset = off
				}
			}
		}
	}
	return resp
}

// offsetFetchAll answers an OffsetFetch of every topic the group
// committed for: this group's queues and every other master's.
func (s *Server) offsetFetchAll(cs *clusterState, req *kmsg.OffsetFetchRequest, resp *kmsg.OffsetFetchResponse, user string) kmsg.Response {
	parts := map[string]map[int32]int64{} // topic -> partition -> offset (-1: none)
	var order []string
	topic := func(name string) map[int32]int64 {
		if parts[name] == nil {
			parts[name] = map[int32]int64{}
			order = append(order, name)
		}
		return parts[name]
	}
	add := func(name string, p int32, off int64) {
		t := topic(name)
		if cur, ok := t[p]; !ok || cur < 0 {
			t[p] = off
		}
	}
	for name := range s.core.OffsetTopics(req.Group) {
		topic(name)
		tc, ok := s.core.Topic(name)
		if !ok {
			continue
		}
		layout := cs.layout(name, tc, true)
		for q := int32(0); q < tc.ReadQueueNums; q++ {
			p := q
			if s.cfg.Cluster != nil {
				p = partitionOf(layout, s.cfg.Group, q)
			}
			if p < 0 {
				continue
			}
			off, found := s.core.ConsumerOffset(req.Group, name, q, false)
			if !found {
				off = -1
			}
			add(name, p, off)
		}
	}
	var keys []groupTopic
	if s.cfg.Cluster != nil {
		for name := range cs.groups {
			if name != s.cfg.Group {
				keys = append(keys, groupTopic{group: name})
			}
		}
	}
	got := map[string]map[string]map[int32]int64{}
	var mu sync.Mutex
	errs := s.forward(cs, user, keys, func(ctx context.Context, addr string, k groupTopic) error {
		offs, err := s.cfg.Peers.FetchOffsets(ctx, addr, req.Group, "")
		mu.Lock()
		got[k.group] = offs
		mu.Unlock()
		return err
	})
	for k, err := range errs {
		if err != nil {
			// Without every owner's answer the list would be partial: the
			// client asks again.
			return offsetFetchFailed(req, resp, peerCode(err))
		}
		for name, qs := range got[k.group] {
			tc, here := s.core.Topic(name)
			layout := cs.layout(name, tc, here)
			for q, off := range qs {
				if p := partitionOf(layout, k.group, q); p >= 0 {
					add(name, p, off)
				}
			}
		}
	}
	for _, name := range order {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = name
		for _, p := range slices.Sorted(maps.Keys(parts[name])) {
			off := parts[name][p]
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, off, -1
			rp.Metadata = kmsg.StringPtr("")
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// offsetFetchFailed answers the whole OffsetFetch with code (the group's
// error from v2, each partition's below).
func offsetFetchFailed(req *kmsg.OffsetFetchRequest, resp *kmsg.OffsetFetchResponse, code int16) kmsg.Response {
	resp.ErrorCode = code
	resp.Topics = nil
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p, -1, -1, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
