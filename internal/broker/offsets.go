package broker

// Consumer offsets and offset lookups: QUERY_CONSUMER_OFFSET (14),
// UPDATE_CONSUMER_OFFSET (15), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
// SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32).
//
// An offset is (group, topic, queueId) -> next offset to consume. Updates
// (UPDATE_CONSUMER_OFFSET and the pull COMMIT_OFFSET flag) go to memory and
// are written crash-safely to <DataDir>/config/consumerOffset.json every
// OffsetFlushInterval and on Close. A crash can lose at most one interval of
// commits, which means re-delivery (at-least-once), never loss.
//
// QUERY_CONSUMER_OFFSET keeps RocketMQ's zero-if-young rule: a group with no
// offset for a queue whose first message is still stored (min offset 0) and
// recent (YoungQueueBytes) gets offset 0, so a new group with
// CONSUME_FROM_LAST_OFFSET reads a young queue from the start. The lookups
// always answer 0 with an `offset` (the Go client does not check the code).

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/vfs"
)

type offsetKey struct {
	group, topic string
	queueID      int32
}

type offsetTable struct {
	fs   vfs.FS
	path string

	flushMu sync.Mutex // serialises flushes; held before mu

	mu      sync.Mutex
	m       map[offsetKey]int64
	version uint64 // bumped on every change
	saved   uint64 // version on disk

	rates *consumeRates // nil: not measured
}

func newOffsetTable(fsys vfs.FS, path string) *offsetTable {
	return &offsetTable{fs: fsys, path: path, m: make(map[offsetKey]int64)}
}

// File layout (RocketMQ's): {"offsetTable":{"topic@group":{"0":12,"1":7}}}.
type offsetFile struct {
	OffsetTable map[string]map[string]int64 `json:"offsetTable"`
}

func (t *offsetTable) load() error {
	data, ok, err := readFile(t.fs, t.path)
	if err != nil || !ok {
		return err
	}
	var f offsetFile
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("broker: parse %s: %w", t.path, err)
	}
	m := make(map[offsetKey]int64)
	for k, queues := range f.OffsetTable {
		topic, group, ok := strings.Cut(k, "@")
		if !ok {
			return fmt.Errorf("broker: parse %s: bad key %q", t.path, k)
		}
		for q, off := range queues {
			qid, err := strconv.ParseInt(q, 10, 32)
			if err != nil {
				return fmt.Errorf("broker: parse %s: bad queue id %q", t.path, q)
			}
			m[offsetKey{group, topic, int32(qid)}] = off
		}
	}
	t.mu.Lock()
	t.m = m
	t.mu.Unlock()
	return nil
}

func (t *offsetTable) get(group, topic string, queueID int32) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	off, ok := t.m[offsetKey{group, topic, queueID}]
	return off, ok
}

func (t *offsetTable) commit(group, topic string, queueID int32, offset int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := offsetKey{group, topic, queueID}
	old, ok := t.m[k]
	if ok && old == offset {
		return
	}
	if ok && t.rates != nil {
		t.rates.add(group, topic, offset-old)
	}
	t.m[k] = offset
	t.version++
}

func (t *offsetTable) deleteTopic(topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.m {
		if k.topic == topic {
			delete(t.m, k)
			t.version++
		}
	}
	if t.rates != nil {
		t.rates.forget("", topic)
	}
}

func (t *offsetTable) deleteGroup(group string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.m {
		if k.group == group {
			delete(t.m, k)
			t.version++
		}
	}
	if t.rates != nil {
		t.rates.forget(group, "")
	}
}

// flush writes the table if it changed since the last flush.
func (t *offsetTable) flush() error {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	t.mu.Lock()
	if t.version == t.saved {
		t.mu.Unlock()
		return nil
	}
	ver := t.version
	f := offsetFile{OffsetTable: make(map[string]map[string]int64)}
	for k, off := range t.m {
		name := k.topic + "@" + k.group
		q := f.OffsetTable[name]
		if q == nil {
			q = make(map[string]int64)
			f.OffsetTable[name] = q
		}
		q[itoa(k.queueID)] = off
	}
	t.mu.Unlock()
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("broker: encode offsets: %w", err)
	}
	if err := writeFileAtomic(t.fs, t.path, data); err != nil {
		return err
	}
	t.mu.Lock()
	t.saved = ver
	t.mu.Unlock()
	return nil
}

// ---- handlers ----

func offsetResponse(req *remoting.Command, key string, v int64) *remoting.Command {
	resp := req.NewResponse(remoting.ResSuccess, "")
	setExt(resp, key, itoa(v))
	return resp
}

func (b *Broker) handleQueryConsumerOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group, topic := e.required("consumerGroup"), e.required("topic")
	qid := e.int32("queueId", 0, true)
	if e.err != nil {
		return nil, e.err
	}
	if off, ok := b.offsets.get(group, topic, qid); ok {
		return offsetResponse(req, "offset", off), nil
	}
	if e.str("setZeroIfNotFound") != "false" && b.queueIsYoung(topic, qid) {
		return offsetResponse(req, "offset", 0), nil
	}
	return req.NewResponse(remoting.ResQueryNotFound, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"), nil
}

// queueIsYoung reports whether a queue still holds its first message and
// that message is within YoungQueueBytes of the CommitLog end (or the queue
// is empty).
func (b *Broker) queueIsYoung(topic string, qid int32) bool {
	if b.st.MinOffset(topic, qid) > 0 {
		return false
	}
	if b.st.MaxOffset(topic, qid) == 0 {
		return true
	}
	res, err := b.st.GetMessage(topic, qid, 0, 1, 1, nil)
	if err != nil {
		return false
	}
	defer res.Release()
	if len(res.Records) == 0 {
		return false
	}
	phys := message.View(res.Records[0]).PhysOffset()
	return b.st.VisibleOffset()-phys <= b.cfg.YoungQueueBytes
}

func (b *Broker) handleUpdateConsumerOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group, topic := e.required("consumerGroup"), e.required("topic")
	qid := e.int32("queueId", 0, true)
	off := e.int64("commitOffset", 0, true)
	if e.err != nil {
		return nil, e.err
	}
	if _, ok := b.topics.get(topic); !ok {
		return nil, protoErrorf(remoting.ResTopicNotExist, "topic[%s] not exist", topic)
	}
	if _, err := b.ensureGroup(group); err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, protoErrorf(remoting.ResInvalidParameter, "commitOffset %d is negative", off)
	}
	b.offsets.commit(group, topic, qid, off)
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

func (b *Broker) topicQueue(req *remoting.Command) (string, int32, *ext) {
	e := &ext{req: req}
	topic := e.required("topic")
	qid := e.int32("queueId", 0, true)
	return topic, qid, e
}

func (b *Broker) handleGetMaxOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	topic, qid, e := b.topicQueue(req)
	if e.err != nil {
		return nil, e.err
	}
	return offsetResponse(req, "offset", b.st.MaxOffset(topic, qid)), nil
}

func (b *Broker) handleGetMinOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	topic, qid, e := b.topicQueue(req)
	if e.err != nil {
		return nil, e.err
	}
	return offsetResponse(req, "offset", b.st.MinOffset(topic, qid)), nil
}

func (b *Broker) handleSearchOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	topic, qid, e := b.topicQueue(req)
	ts := e.int64("timestamp", 0, true)
	if e.err != nil {
		return nil, e.err
	}
	return offsetResponse(req, "offset", b.st.OffsetByTime(topic, qid, ts)), nil
}

func (b *Broker) handleEarliestStoreTime(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	topic, qid, e := b.topicQueue(req)
	if e.err != nil {
		return nil, e.err
	}
	ts, err := b.st.EarliestStoreTime(topic, qid)
	if err != nil {
		// RocketMQ answers -1 when the queue has no readable message.
		b.log.Debug("earliest store time unavailable", "topic", topic, "queue_id", qid, "err", err)
		ts = -1
	}
	return offsetResponse(req, "timestamp", ts), nil
}
