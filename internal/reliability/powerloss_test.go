package reliability

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

const (
	plTopic = "PowerLoss"
	plGroup = "cg-pl"
	plDir   = "/data"
)

type plAck struct {
	key    string
	queue  int32
	offset int64
}

// plLedger is what clients were told by the broker in one round.
type plLedger struct {
	mu       sync.Mutex
	acks     []plAck
	delayed  []string // UNIQ_KEYs of acknowledged delayed sends
	sentBack []string // UNIQ_KEYs of acknowledged send-backs
	topics   []string // acknowledged topic creations
	failures int      // requests that failed (expected only around the crash)
}

func (l *plLedger) snapshot() plLedger {
	l.mu.Lock()
	defer l.mu.Unlock()
	return plLedger{acks: append([]plAck(nil), l.acks...), delayed: append([]string(nil), l.delayed...),
		sentBack: append([]string(nil), l.sentBack...), topics: append([]string(nil), l.topics...)}
}

func plRounds() int {
	if long() {
		return 300 // the offline check of the whole store per round makes this quadratic
	}
	return 60
}

// TestPowerLossBrokerWorkload runs the broker and its store on the
// crash-simulating MemFS under sends, delayed sends, send-backs (retries),
// topic creations and consumer offset commits, and pulls the plug at random
// moments (strict crashes, torn writes and pages written back in no order
// take turns). After each power
// loss the store passes the offline check and, on the recovered broker,
// every acknowledged send is at its queue offset, every consumer offset
// that was durable before the crash is there (or a later one), every
// created topic exists; at the end every acknowledged delayed message and
// retry has been delivered.
func TestPowerLossBrokerWorkload(t *testing.T) {
	s := seed(t)
	t.Logf("seed %d (rerun with KEEL_SEED)", s)
	rng := rand.New(rand.NewPCG(s, 2))
	mem := vfs.NewMem()
	if err := mem.MkdirAll(plDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	var state plLedger
	durable := map[string]int64{}
	rounds, torn, writeBack, checked := plRounds(), 0, 0, 0
	var sendFailures int
	for r := range rounds {
		if r > 0 {
			checkAfterCrash(t, r, mem)
			checked++
		}
		watch := newOffsetWatchFS(mem, plDir)
		n, err := openNode(t, watch, plDir, nodeOptions{})
		if err != nil {
			t.Fatalf("round %d: reopen after power loss: %v", r, err)
		}
		verifyPowerLoss(t, r, n, &state, durable)
		if r == 0 {
			createTopicOn(t, n, plTopic, 4)
		}
		led := &plLedger{}
		stop := runPLWorkload(t, n, led, rng.Uint64())
		want := len(state.acks) + 5 + rng.IntN(60)
		if !poll(20*time.Second, func() bool { led.mu.Lock(); defer led.mu.Unlock(); return len(led.acks) >= want-len(state.acks) }) {
			t.Fatalf("round %d: no progress", r)
		}
		// Power loss: what clients were told so far must survive.
		snap := led.snapshot()
		durable = watch.snapshot()
		var clone *vfs.MemFS
		switch r % 3 {
		case 1:
			clone = mem.CrashCloneWith(rand.New(rand.NewPCG(rng.Uint64(), 3)))
			torn++
		case 2:
			clone = mem.CrashCloneWriteBack(rand.New(rand.NewPCG(rng.Uint64(), 4)))
			writeBack++
		default:
			clone = mem.CrashClone()
		}
		stop()
		if err := n.close(); err != nil {
			t.Logf("round %d: closing the pre-crash instance: %v", r, err)
		}
		sendFailures += led.failures
		state.acks = append(state.acks, snap.acks...)
		state.delayed = append(state.delayed, snap.delayed...)
		state.sentBack = append(state.sentBack, snap.sentBack...)
		state.topics = append(state.topics, snap.topics...)
		mem = clone
	}
	n := mustOpenNode(t, newOffsetWatchFS(mem, plDir), plDir, nodeOptions{})
	verifyPowerLoss(t, rounds, n, &state, durable)
	fired, dups := waitScheduled(t, n, &state)
	t.Logf("SUMMARY powerloss seed=%d rounds=%d torn_crashes=%d write_back_crashes=%d strict_crashes=%d offline_checks=%d acked_sends=%d "+
		"delayed=%d fired=%d delayed_dup_deliveries=%d sent_back=%d topics=%d durable_offsets=%d lost=0 failed_requests=%d index_keys_missing=0",
		s, rounds, torn, writeBack, rounds-torn-writeBack, checked, len(state.acks), len(state.delayed), fired, dups, len(state.sentBack),
		len(state.topics), len(durable), sendFailures)
}

func createTopicOn(t *testing.T, n *node, topic string, queues int) {
	t.Helper()
	q := strconv.Itoa(queues)
	resp, err := call(n.dial(), remoting.ReqUpdateAndCreateTopic, map[string]string{
		"topic": topic, "readQueueNums": q, "writeQueueNums": q, "perm": "6"}, nil)
	if err != nil || resp.Code != remoting.ResSuccess {
		t.Fatalf("create topic %s: %v %v", topic, resp, err)
	}
}

// verifyPowerLoss checks the recovered node against what was acknowledged
// before the crash.
func verifyPowerLoss(t *testing.T, round int, n *node, state *plLedger, durable map[string]int64) {
	t.Helper()
	lost := 0
	for _, a := range state.acks {
		res, err := n.st.GetMessage(plTopic, a.queue, a.offset, 1, 1<<20, nil)
		if err != nil {
			t.Fatalf("round %d: GetMessage: %v", round, err)
		}
		ok := len(res.Records) == 1 && string(message.View(res.Records[0]).UniqKey()) == a.key
		res.Release()
		if !ok {
			lost++
			if lost <= 5 {
				t.Errorf("round %d: LOST acknowledged send %s at queue %d offset %d (status %v)", round, a.key, a.queue, a.offset, res.Status)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("round %d: %d of %d acknowledged sends lost", round, lost, len(state.acks))
	}
	cl := n.dial()
	for k, want := range durable {
		topic, group, q := splitOffsetKey(k)
		resp, err := call(cl, remoting.ReqQueryConsumerOffset, map[string]string{
			"consumerGroup": group, "topic": topic, "queueId": strconv.Itoa(int(q)), "setZeroIfNotFound": "false"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, perr := resp.ExtInt64("offset")
		if resp.Code != remoting.ResSuccess || perr != nil || got < want {
			t.Fatalf("round %d: offset %s: code %d offset %d (%v), want >= %d (durable before the crash)",
				round, k, resp.Code, got, perr, want)
		}
	}
	for _, topic := range state.topics {
		if _, ok := n.b.Topic(topic); !ok {
			t.Fatalf("round %d: topic %s lost although its creation was acknowledged", round, topic)
		}
	}
}

// runPLWorkload starts the round's clients; the returned func stops them.
func runPLWorkload(t *testing.T, n *node, led *plLedger, sd uint64) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	fail := func() { led.mu.Lock(); led.failures++; led.mu.Unlock() }
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := n.dial()
			r := rand.New(rand.NewPCG(sd, uint64(g)))
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				plSend(cl, led, r, fmt.Sprintf("P%d-%d-%d", sd%100000, g, i), 0, fail)
			}
		}()
	}
	wg.Add(1)
	go func() { // delayed sends and topic creations
		defer wg.Done()
		cl := n.dial()
		r := rand.New(rand.NewPCG(sd, 9))
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if i%7 == 3 {
				topic := fmt.Sprintf("PLT-%d-%d", sd%100000, i)
				resp, err := call(cl, remoting.ReqUpdateAndCreateTopic, map[string]string{
					"topic": topic, "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}, nil)
				if err == nil && resp.Code == remoting.ResSuccess {
					led.mu.Lock()
					led.topics = append(led.topics, topic)
					led.mu.Unlock()
				} else {
					fail()
				}
				continue
			}
			plSend(cl, led, r, fmt.Sprintf("D%d-%d", sd%100000, i), int32(1+r.IntN(3)), fail)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		plConsume(n, led, rand.New(rand.NewPCG(sd, 10)), done, fail)
	}()
	return func() { close(done); wg.Wait() }
}

func plSend(cl *remoting.Client, led *plLedger, r *rand.Rand, key string, delay int32, fail func()) {
	props := map[string]string{message.PropUniqKey: key}
	if delay > 0 {
		props[message.PropDelayLevel] = strconv.Itoa(int(delay))
	}
	q := int32(r.IntN(4))
	body := makeBody(key)
	resp, err := call(cl, remoting.ReqSendMessage, sendExt(plTopic, q, message.EncodeProperties(props)), body)
	if err != nil || resp.Code != remoting.ResSuccess {
		fail()
		return
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	if delay > 0 {
		led.delayed = append(led.delayed, key)
		return
	}
	off, _ := resp.ExtInt64("queueOffset")
	qid, _ := resp.ExtInt32("queueId")
	led.acks = append(led.acks, plAck{key: key, queue: qid, offset: off})
}

// plConsume pulls every queue of the topic from the group's offset, sends
// about one message in eight back (a failed consumption) and commits.
func plConsume(n *node, led *plLedger, r *rand.Rand, done chan struct{}, fail func()) {
	cl := n.dial()
	next := map[int32]int64{}
	for q := range int32(4) {
		resp, err := call(cl, remoting.ReqQueryConsumerOffset, map[string]string{
			"consumerGroup": plGroup, "topic": plTopic, "queueId": strconv.Itoa(int(q))}, nil)
		if err != nil {
			return
		}
		next[q], _ = resp.ExtInt64("offset") // not found: 0
	}
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		default:
		}
		q := int32(i % 4)
		resp, err := call(cl, remoting.ReqPullMessage, pullExt(plGroup, plTopic, q, next[q], 16, flagSubscription, 0), nil)
		if err != nil {
			fail()
			continue
		}
		if resp.Code != remoting.ResSuccess {
			continue
		}
		for _, rec := range splitRecords(resp.Body) {
			v := message.View(rec)
			if r.IntN(8) == 0 && v.ReconsumeTimes() == 0 {
				plSendBack(cl, led, v, fail)
			}
		}
		nb, _ := resp.ExtInt64("nextBeginOffset")
		next[q] = nb
		resp, err = call(cl, remoting.ReqUpdateConsumerOffset, map[string]string{
			"consumerGroup": plGroup, "topic": plTopic, "queueId": strconv.Itoa(int(q)), "commitOffset": strconv.FormatInt(nb, 10)}, nil)
		if err != nil || resp.Code != remoting.ResSuccess {
			fail()
		}
	}
}

func plSendBack(cl *remoting.Client, led *plLedger, v message.View, fail func()) {
	resp, err := call(cl, remoting.ReqConsumerSendMsgBack, map[string]string{
		"group": plGroup, "offset": strconv.FormatInt(v.PhysOffset(), 10), "delayLevel": "0",
		"originMsgId": "", "maxReconsumeTimes": "16"}, nil)
	if err != nil || resp.Code != remoting.ResSuccess {
		fail()
		return
	}
	led.mu.Lock()
	led.sentBack = append(led.sentBack, string(v.UniqKey()))
	led.mu.Unlock()
}

// splitRecords splits a pull body into its stored records.
func splitRecords(body []byte) [][]byte {
	var out [][]byte
	for len(body) >= 4 {
		size := int(message.View(body).TotalSize())
		if size <= 0 || size > len(body) {
			break
		}
		out = append(out, body[:size])
		body = body[size:]
	}
	return out
}

// waitScheduled waits until every acknowledged delayed send has reached
// the topic and every acknowledged send-back has reached the retry topic;
// it returns the delayed messages delivered and the extra deliveries.
func waitScheduled(t *testing.T, n *node, state *plLedger) (fired, dups int) {
	t.Helper()
	var missing []string
	ok := poll(30*time.Second, func() bool {
		inTopic := keysIn(t, n.st, plTopic)
		inRetry := keysIn(t, n.st, broker.RetryTopic(plGroup))
		missing = missing[:0]
		fired, dups = 0, 0
		for _, k := range state.delayed {
			if c := inTopic[k]; c == 0 {
				missing = append(missing, "delayed "+k)
			} else {
				fired++
				dups += c - 1
			}
		}
		for _, k := range state.sentBack {
			if inRetry[k] == 0 {
				missing = append(missing, "retry "+k)
			}
		}
		return len(missing) == 0
	})
	if !ok {
		t.Errorf("%d acknowledged scheduled messages never delivered, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	return fired, dups
}

// keysIn counts the UNIQ_KEYs stored in every queue of topic.
func keysIn(t *testing.T, st *store.Store, topic string) map[string]int {
	out := map[string]int{}
	for _, q := range st.Queues(topic) {
		for off := st.MinOffset(topic, q); off < st.MaxOffset(topic, q); {
			res, err := st.GetMessage(topic, q, off, 256, 4<<20, nil)
			if err != nil || len(res.Records) == 0 {
				if err == nil {
					res.Release()
				}
				if errors.Is(err, store.ErrClosed) {
					return out
				}
				break
			}
			for _, rec := range res.Records {
				out[string(message.View(rec).UniqKey())]++
			}
			off = res.NextOffset
			res.Release()
		}
	}
	return out
}

// checkAfterCrash runs the offline check on the crashed filesystem and
// fails on any problem. Torn writes included: vfs.MemFS tears an unsynced
// write at any byte, even a 4-byte hash slot of an index file, and index
// recovery rebuilds the slot table of a file that was being written, so
// every key of a record stays findable by QueryByKey.
func checkAfterCrash(t *testing.T, round int, mem *vfs.MemFS) {
	t.Helper()
	rep, err := store.Check(nodeStoreConfig(mem, plDir))
	if err != nil {
		t.Fatalf("round %d: offline check after power loss: %v", round, err)
	}
	for _, p := range rep.Problems {
		t.Errorf("round %d: offline check after power loss: %s", round, p)
	}
	if t.Failed() {
		t.FailNow()
	}
}
