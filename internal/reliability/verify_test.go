package reliability

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// logRecord is one message found in a ConsumeQueue of the verified topic.
type logRecord struct {
	key    string
	id     string
	hash   uint64
	intact bool // the body is exactly what makeBody(id) produces
}

type pos struct {
	queue  int32
	offset int64
}

// logContents is the full contents of a topic's queues.
type logContents struct {
	at       map[pos]logRecord
	count    map[string]int // UNIQ_KEY -> occurrences
	records  int
	corrupt  []string
	byPhys   map[string]string // offset msgId -> UNIQ_KEY of the record there
	maxQueue map[int32]int64
}

// readLog opens the (stopped) store in cfg.Dir and reads every queue of
// topic from its min to its max offset, and the record behind each offset
// message ID in ids.
func readLog(t *testing.T, cfg store.Config, topic string, ids []string) *logContents {
	t.Helper()
	st, err := store.Open(cfg)
	if err != nil {
		t.Fatalf("store.Open for verification: %v", err)
	}
	defer st.Close()
	lc := &logContents{at: make(map[pos]logRecord), count: make(map[string]int),
		byPhys: make(map[string]string), maxQueue: make(map[int32]int64)}
	for _, q := range st.Queues(topic) {
		lc.readQueue(t, st, topic, q)
	}
	for _, id := range ids {
		_, phys, err := message.ParseOffsetMsgID(id)
		if err != nil {
			continue
		}
		rec, err := st.LookMessageByOffset(phys)
		if err != nil {
			continue
		}
		lc.byPhys[id] = string(message.View(rec).UniqKey())
	}
	return lc
}

func (lc *logContents) readQueue(t *testing.T, st *store.Store, topic string, q int32) {
	t.Helper()
	off, max := st.MinOffset(topic, q), st.MaxOffset(topic, q)
	lc.maxQueue[q] = max
	if off != 0 {
		t.Errorf("queue %d: min offset %d, want 0 (nothing was deleted)", q, off)
	}
	for off < max {
		res, err := st.GetMessage(topic, q, off, 256, 4<<20, nil)
		if err != nil {
			t.Fatalf("GetMessage %s:%d at %d: %v", topic, q, off, err)
		}
		if res.Status != store.Found || len(res.Records) == 0 {
			t.Fatalf("GetMessage %s:%d at %d: %v, no records (max %d)", topic, q, off, res.Status, max)
		}
		for i, rec := range res.Records {
			v := message.View(rec)
			if v.QueueOffset() != off+int64(i) {
				t.Errorf("queue %d: record at %d says queue offset %d", q, off+int64(i), v.QueueOffset())
			}
			lc.add(q, off+int64(i), v)
		}
		off += int64(len(res.Records))
		if res.NextOffset != off {
			t.Fatalf("queue %d: next offset %d after %d records, want %d (gap)", q, res.NextOffset, len(res.Records), off)
		}
		res.Release()
	}
}

func (lc *logContents) add(q int32, off int64, v message.View) {
	body := v.Body()
	id, _ := bodyID(body)
	r := logRecord{key: string(v.UniqKey()), id: id, hash: hashBody(body)}
	r.intact = id != "" && bytes.Equal(body, makeBody(id))
	if !r.intact {
		lc.corrupt = append(lc.corrupt, fmt.Sprintf("queue %d offset %d (id %q)", q, off, id))
	}
	lc.at[pos{q, off}] = r
	lc.count[r.key]++
	lc.records++
}

// verdict is the outcome of checking a ledger against the log.
type verdict struct {
	acked          int
	lost           int // acknowledged, not in the log at all
	misplaced      int // acknowledged, but not at the reported queue offset
	badMsgID       int // the offset message ID does not lead to the message
	retryDups      int // extra copies of a message whose send was retried
	unexplainedDup int // extra copies of a message sent once
	unackedStored  int // stored messages whose send never got an ack
	orderErrors    int
	corrupt        int
	records        int
	consumerDups   int // deliveries beyond the first
	redeliveries   int // deliveries beyond the number of stored copies
	unconsumed     int
}

func (v verdict) String() string {
	return fmt.Sprintf("acked=%d lost=%d misplaced=%d badMsgID=%d log_records=%d retry_dups=%d unexplained_dups=%d "+
		"unacked_stored=%d order_errors=%d corrupt=%d consumer_dups=%d redeliveries=%d unconsumed=%d",
		v.acked, v.lost, v.misplaced, v.badMsgID, v.records, v.retryDups, v.unexplainedDup,
		v.unackedStored, v.orderErrors, v.corrupt, v.consumerDups, v.redeliveries, v.unconsumed)
}

// judge compares what producers were told with the log.
func judge(t *testing.T, led *ledger, lc *logContents) verdict {
	t.Helper()
	led.mu.Lock()
	defer led.mu.Unlock()
	v := verdict{acked: len(led.acks), records: lc.records, corrupt: len(lc.corrupt)}
	for _, c := range lc.corrupt[:min(len(lc.corrupt), 10)] {
		t.Errorf("corrupt record: %s", c)
	}
	ackedKeys := make(map[string]bool, len(led.acks))
	for _, a := range led.acks {
		ackedKeys[a.key] = true
		v.checkAck(t, a, lc)
	}
	for key, n := range lc.count {
		if n > 1 {
			if led.attempts[key] > 1 {
				v.retryDups += n - 1
			} else {
				v.unexplainedDup += n - 1
				t.Errorf("message %s stored %d times but sent once", key, n)
			}
		}
		if !ackedKeys[key] {
			v.unackedStored++
		}
	}
	v.orderErrors = checkOrder(t, led.acks)
	for _, a := range led.acks {
		n := led.consumed[a.key]
		if n == 0 {
			v.unconsumed++
			continue
		}
		// Deliveries beyond the stored copies are re-deliveries (offsets
		// not yet durable when the broker died or the consumer restarted).
		v.consumerDups += n - 1
		v.redeliveries += max(0, n-lc.count[a.key])
	}
	return v
}

func (v *verdict) checkAck(t *testing.T, a ack, lc *logContents) {
	r, ok := lc.at[pos{a.queue, a.offset}]
	switch {
	case ok && r.key == a.key && r.hash == a.hash && r.id == a.id:
	case lc.count[a.key] == 0:
		v.lost++
		if v.lost <= 10 {
			t.Errorf("LOST: acknowledged %s (%s) at queue %d offset %d is not in the log", a.key, a.id, a.queue, a.offset)
		}
		return
	default:
		v.misplaced++
		if v.misplaced <= 10 {
			t.Errorf("acknowledged %s (%s) at queue %d offset %d: the log has %+v there", a.key, a.id, a.queue, a.offset, r)
		}
		return
	}
	if got, ok := lc.byPhys[a.offsetMsgID]; !ok || got != a.key {
		v.badMsgID++
		if v.badMsgID <= 10 {
			t.Errorf("msgId %s of %s leads to %q (found %v)", a.offsetMsgID, a.key, got, ok)
		}
	}
}

// checkOrder checks that per queue the log order never contradicts the
// order of acknowledgement: if a's ack arrived before b's first attempt
// began, a's queue offset is below b's.
func checkOrder(t *testing.T, acks []ack) int {
	byQueue := make(map[int32][]ack)
	for _, a := range acks {
		byQueue[a.queue] = append(byQueue[a.queue], a)
	}
	bad := 0
	for q, list := range byQueue {
		slices.SortFunc(list, func(x, y ack) int { return int(x.offset - y.offset) })
		// For b at position j: every earlier-offset a must not have been
		// sent after b was acknowledged.
		var maxStart int64 = -1
		var maxStartKey string
		for j, b := range list {
			if j > 0 && list[j-1].offset == b.offset {
				bad++
				t.Errorf("queue %d offset %d acknowledged twice (%s, %s)", q, b.offset, list[j-1].key, b.key)
			}
			if maxStart > b.ackAt {
				bad++
				if bad <= 10 {
					t.Errorf("queue %d: %s (offset %d) was acknowledged before %s was sent, yet sits after it",
						q, b.key, b.offset, maxStartKey)
				}
			}
			if b.sendStart > maxStart {
				maxStart, maxStartKey = b.sendStart, b.key
			}
		}
	}
	return bad
}
