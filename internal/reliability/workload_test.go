package reliability

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// makeBody is the body of message id: the id, a separator and a payload
// derived from the id (so any stored body can be checked on its own).
// Bodies stay below the Go client's 4 KiB compression threshold.
func makeBody(id string) []byte {
	h := fnv.New64a()
	h.Write([]byte(id))
	seed := h.Sum64()
	n := int(seed % 2048)
	b := make([]byte, 0, len(id)+1+n)
	b = append(b, id...)
	b = append(b, '|')
	r := rand.New(rand.NewPCG(seed, 0x6b65656c))
	for range n {
		b = append(b, byte('a'+r.IntN(26)))
	}
	return b
}

// bodyID returns the id a body made by makeBody starts with.
func bodyID(body []byte) (string, bool) {
	for i, c := range body {
		if c == '|' {
			return string(body[:i]), true
		}
	}
	return "", false
}

func hashBody(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// ack is one acknowledged send.
type ack struct {
	id          string // body id
	key         string // UNIQ_KEY
	producer    string
	queue       int32
	offset      int64  // queue offset the broker reported
	offsetMsgID string // broker's msgId: store host + CommitLog offset
	hash        uint64 // body hash
	sendStart   int64  // ledger clock when the first attempt began
	ackAt       int64  // ledger clock when the ack arrived
	attempts    int
}

// ledger records what producers were told and what the consumer saw.
type ledger struct {
	clock atomic.Int64

	mu         sync.Mutex
	acks       []ack
	attempts   map[string]int // UNIQ_KEY -> sends tried (acked or not)
	abandoned  int            // messages given up after their retries
	errors     int            // failed attempts
	consumed   map[string]int // UNIQ_KEY -> deliveries
	deliveries int
	// ackedKeys and pending keep unconsumed() cheap: it is polled while
	// the consumer drains, and a scan of every ack under mu (millions in
	// the long mode) starved the consumer's own callbacks of the lock.
	ackedKeys map[string]bool
	pending   int // acknowledged keys not consumed yet
}

func newLedger() *ledger {
	return &ledger{attempts: make(map[string]int), consumed: make(map[string]int), ackedKeys: make(map[string]bool)}
}

func (l *ledger) tick() int64 { return l.clock.Add(1) }

func (l *ledger) attempt(key string, err error) {
	l.mu.Lock()
	l.attempts[key]++
	if err != nil {
		l.errors++
	}
	l.mu.Unlock()
}

func (l *ledger) acked(a ack) {
	a.ackAt = l.tick()
	l.mu.Lock()
	a.attempts = l.attempts[a.key]
	l.acks = append(l.acks, a)
	if !l.ackedKeys[a.key] {
		l.ackedKeys[a.key] = true
		if l.consumed[a.key] == 0 {
			l.pending++
		}
	}
	l.mu.Unlock()
}

func (l *ledger) abandon() {
	l.mu.Lock()
	l.abandoned++
	l.mu.Unlock()
}

func (l *ledger) consume(key string) {
	l.mu.Lock()
	l.consumed[key]++
	l.deliveries++
	if l.consumed[key] == 1 && l.ackedKeys[key] {
		l.pending--
	}
	l.mu.Unlock()
}

func (l *ledger) ackCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// unconsumed counts acknowledged messages (distinct keys) the consumer has
// not seen yet.
func (l *ledger) unconsumed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending
}

// workload drives a keel broker with producers and a consumer until
// stopped. Producers retry a failed send of the same message (same
// UNIQ_KEY) a few times, then abandon it.
type workload struct {
	t       *testing.T
	topic   string
	nsAddr  string
	brAddr  string
	queues  int
	led     *ledger
	retries int

	stopping chan struct{}
	prodWG   sync.WaitGroup
	closers  []func()

	consumer         rocketmq.PushConsumer
	group            string
	consumerRestarts int
}

func newWorkload(t *testing.T, p *keelProc, topic string, queues int) *workload {
	return &workload{t: t, topic: topic, nsAddr: p.nsAddr, brAddr: p.brAddr, queues: queues,
		led: newLedger(), retries: 4, stopping: make(chan struct{})}
}

func (w *workload) stopped() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

// pause waits d or until the workload stops (client retry back-off).
func (w *workload) pause(d time.Duration) {
	select {
	case <-w.stopping:
	case <-time.After(d):
	}
}

// stopProducers ends the producers after their current message.
func (w *workload) stopProducers() {
	close(w.stopping)
	w.prodWG.Wait()
}

func (w *workload) close() {
	w.stopConsumer()
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

// startGoProducers starts one official Go client producer used by n
// goroutines with synchronous sends.
func (w *workload) startGoProducers(n int) {
	t := w.t
	p, err := producer.NewDefaultProducer(
		producer.WithNameServer(primitive.NamesrvAddr{w.nsAddr}),
		producer.WithGroupName("pg-reliability"),
		producer.WithInstanceName(fmt.Sprintf("gp-%d", time.Now().UnixNano())),
		producer.WithRetry(0), // retries are counted here, with the same UNIQ_KEY
		producer.WithSendMsgTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	w.closers = append(w.closers, func() { p.Shutdown() })
	for g := range n {
		w.prodWG.Add(1)
		go func() {
			defer w.prodWG.Done()
			for seq := 0; !w.stopped(); seq++ {
				w.goSend(p, fmt.Sprintf("go%d-%d", g, seq))
			}
		}()
	}
}

func (w *workload) goSend(p interface {
	SendSync(context.Context, ...*primitive.Message) (*primitive.SendResult, error)
}, id string) {
	body := makeBody(id)
	m := primitive.NewMessage(w.topic, body)
	m.WithProperty(primitive.PropertyUniqueClientMessageIdKeyIndex, primitive.CreateUniqID())
	key := m.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex)
	start := w.led.tick()
	for try := 0; try <= w.retries; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		res, err := p.SendSync(ctx, m)
		cancel()
		if err == nil && res.Status != primitive.SendOK {
			err = fmt.Errorf("status %d", res.Status)
		}
		w.led.attempt(key, err)
		if err == nil {
			w.led.acked(ack{id: id, key: key, producer: "go", queue: int32(res.MessageQueue.QueueId),
				offset: res.QueueOffset, offsetMsgID: res.OffsetMsgID, hash: hashBody(body), sendStart: start})
			return
		}
		if w.stopped() && try > 0 {
			break
		}
		w.pause(50 * time.Millisecond)
	}
	w.led.abandon()
}

// startRawProducers starts n goroutines sending SEND_MESSAGE (V1 header)
// with Keel's remoting client, each on its own connection, choosing queues
// round-robin.
func (w *workload) startRawProducers(n int) {
	for g := range n {
		w.prodWG.Add(1)
		go func() {
			defer w.prodWG.Done()
			rp := &rawProducer{w: w, name: fmt.Sprintf("raw%d", g)}
			defer rp.closeConn()
			for seq := 0; !w.stopped(); seq++ {
				rp.send(fmt.Sprintf("raw%d-%d", g, seq), int32(seq%w.queues))
			}
		}()
	}
}

type rawProducer struct {
	w    *workload
	name string
	cl   *remoting.Client
}

func (rp *rawProducer) closeConn() {
	if rp.cl != nil {
		rp.cl.Close()
		rp.cl = nil
	}
}

func (rp *rawProducer) send(id string, queue int32) {
	w := rp.w
	body := makeBody(id)
	key := "RAW" + strconv.FormatUint(hashBody([]byte(id)), 16) + "-" + id
	props := message.EncodeProperties(map[string]string{message.PropUniqKey: key, message.PropWaitStoreMsgOK: "true"})
	start := w.led.tick()
	for try := 0; try <= w.retries; try++ {
		resp, err := rp.invoke(remoting.NewRequest(remoting.ReqSendMessage, map[string]string{
			"producerGroup": "pg-raw", "topic": w.topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
			"queueId": strconv.Itoa(int(queue)), "sysFlag": "0", "bornTimestamp": strconv.FormatInt(time.Now().UnixMilli(), 10),
			"flag": "0", "properties": props, "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
		}, body))
		if err == nil && resp.Code != remoting.ResSuccess {
			err = fmt.Errorf("code %d %s", resp.Code, resp.Remark)
		}
		w.led.attempt(key, err)
		if err == nil {
			qid, err1 := resp.ExtInt32("queueId")
			qo, err2 := resp.ExtInt64("queueOffset")
			if err1 != nil || err2 != nil {
				w.t.Errorf("send response without queueId/queueOffset: %v", resp.ExtFields)
				return
			}
			w.led.acked(ack{id: id, key: key, producer: rp.name, queue: qid, offset: qo,
				offsetMsgID: resp.Ext("msgId"), hash: hashBody(body), sendStart: start})
			return
		}
		if w.stopped() && try > 0 {
			break
		}
		w.pause(50 * time.Millisecond)
	}
	w.led.abandon()
}

func (rp *rawProducer) invoke(req *remoting.Command) (*remoting.Command, error) {
	if rp.cl != nil {
		select {
		case <-rp.cl.Done():
			rp.closeConn()
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if rp.cl == nil {
		cl, err := remoting.Dial(ctx, rp.w.brAddr, remoting.ClientConfig{})
		if err != nil {
			return nil, err
		}
		rp.cl = cl
	}
	resp, err := rp.cl.Invoke(ctx, req)
	if err != nil {
		rp.closeConn()
	}
	return resp, err
}

// startConsumer starts an official Go client push consumer (clustering,
// from the first offset) that counts deliveries per UNIQ_KEY.
func (w *workload) startConsumer(group string) {
	t := w.t
	c, err := consumer.NewPushConsumer(
		consumer.WithNameServer(primitive.NamesrvAddr{w.nsAddr}),
		consumer.WithGroupName(group),
		consumer.WithInstance(fmt.Sprintf("c-%d", time.Now().UnixNano())),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumerModel(consumer.Clustering))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(w.topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			w.led.consume(m.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex))
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	w.consumer, w.group = c, group
}

func (w *workload) stopConsumer() {
	if w.consumer != nil {
		w.consumer.Shutdown()
		w.consumer = nil
	}
}
