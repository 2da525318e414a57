package kafka

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/netlimit"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// amplifier builds a request whose body is almost all minimal elements of
// one array (zero-valued kmsg structs, which kmsg encodes at their least
// size): the most Go memory per wire byte the API allows.
type amplifier struct {
	name string
	make func(n int) kmsg.Request
}

var amplifiers = []amplifier{
	{"Produce v9 topics", func(n int) kmsg.Request {
		r := kmsg.NewPtrProduceRequest()
		r.SetVersion(9)
		r.Topics = make([]kmsg.ProduceRequestTopic, n)
		return r
	}},
	{"Metadata v1 topics", func(n int) kmsg.Request {
		r := kmsg.NewPtrMetadataRequest()
		r.SetVersion(1)
		r.Topics = make([]kmsg.MetadataRequestTopic, n)
		empty := ""
		for i := range r.Topics {
			r.Topics[i].Topic = &empty
		}
		return r
	}},
	{"Fetch v12 topics", func(n int) kmsg.Request {
		r := kmsg.NewPtrFetchRequest()
		r.SetVersion(12)
		r.Topics = make([]kmsg.FetchRequestTopic, n)
		return r
	}},
	{"Fetch v12 forgotten partitions", func(n int) kmsg.Request {
		r := kmsg.NewPtrFetchRequest()
		r.SetVersion(12)
		r.ForgottenTopics = []kmsg.FetchRequestForgottenTopic{{Partitions: make([]int32, n/4)}}
		return r
	}},
	{"OffsetCommit v8 topics", func(n int) kmsg.Request {
		r := kmsg.NewPtrOffsetCommitRequest()
		r.SetVersion(8)
		r.Topics = make([]kmsg.OffsetCommitRequestTopic, n)
		return r
	}},
	{"JoinGroup v9 protocols", func(n int) kmsg.Request {
		r := kmsg.NewPtrJoinGroupRequest()
		r.SetVersion(9)
		r.Protocols = make([]kmsg.JoinGroupRequestProtocol, n)
		return r
	}},
	{"DescribeGroups v5 groups", func(n int) kmsg.Request {
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.SetVersion(5)
		r.Groups = make([]string, n)
		return r
	}},
	{"CreateTopics v7 topics", func(n int) kmsg.Request {
		r := kmsg.NewPtrCreateTopicsRequest()
		r.SetVersion(7)
		r.Topics = make([]kmsg.CreateTopicsRequestTopic, n/8)
		return r
	}},
	{"ListOffsets v7 topics", func(n int) kmsg.Request {
		r := kmsg.NewPtrListOffsetsRequest()
		r.SetVersion(7)
		r.Topics = make([]kmsg.ListOffsetsRequestTopic, n)
		return r
	}},
	{"DescribeConfigs v4 resources", func(n int) kmsg.Request {
		r := kmsg.NewPtrDescribeConfigsRequest()
		r.SetVersion(4)
		r.Resources = make([]kmsg.DescribeConfigsRequestResource, n/2)
		return r
	}},
	{"IncrementalAlterConfigs v1 resources", func(n int) kmsg.Request {
		r := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r.SetVersion(1)
		r.Resources = make([]kmsg.IncrementalAlterConfigsRequestResource, n/2)
		return r
	}},
	{"OffsetFetch v7 topics", func(n int) kmsg.Request {
		r := kmsg.NewPtrOffsetFetchRequest()
		r.SetVersion(7)
		r.Topics = make([]kmsg.OffsetFetchRequestTopic, n)
		return r
	}},
	{"Produce v3 90000 partitions, padded", func(n int) kmsg.Request {
		// Under the element cap and within the decoding bound, the most
		// work for the handler: every partition is answered.
		r := kmsg.NewPtrProduceRequest()
		r.SetVersion(3)
		r.Acks = 1
		ps := make([]kmsg.ProduceRequestTopicPartition, 90_001)
		ps[90_000].Records = make([]byte, n/2)
		r.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: ps}}
		return r
	}},
	{"Produce v3 partitions", func(n int) kmsg.Request {
		r := kmsg.NewPtrProduceRequest()
		r.SetVersion(3)
		r.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: make([]kmsg.ProduceRequestTopicPartition, n/8)}}
		return r
	}},
}

// craftFrame returns a whole frame (size prefix, header, body) of about
// targetBytes for a.
func craftFrame(a amplifier, targetBytes int) []byte {
	per := len(a.make(1001).AppendTo(nil)) - len(a.make(1).AppendTo(nil))
	n := max(1, targetBytes*1000/max(per, 1))
	req := a.make(n)
	b := binary.BigEndian.AppendUint32(nil, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, 7)
	b = binary.BigEndian.AppendUint16(b, 0xffff) // null client id
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// heapSampler records the peak of the heap's object bytes.
type heapSampler struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func heapObjectBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if v := heapObjectBytes(); v > h.peak.Load() {
				h.peak.Store(v)
			}
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	<-h.done
	return h.peak.Load()
}

// hostileConns sends frames from conns connections at once, each
// connection sending its frame, reading until the broker closes it, and
// starting again, until ctx ends. It returns the number of frames sent.
func hostileConns(ctx context.Context, addr string, frames [][]byte, conns int) (*sync.WaitGroup, *atomic.Int64) {
	var wg sync.WaitGroup
	var sent atomic.Int64
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for k := i; ctx.Err() == nil; k++ {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					continue
				}
				go func() { <-ctx.Done(); c.Close() }()
				if _, err := c.Write(frames[k%len(frames)]); err == nil {
					sent.Add(1)
				}
				io.Copy(io.Discard, c) // until the broker closes (or answers and the deadline ends it)
				c.Close()
			}
		}(i)
	}
	return &wg, &sent
}

// TestHostileAmplificationBoundedHeap: eight connections at once send
// maximal-amplification requests of 4 MiB for every array-carrying API
// (each alone decodes to hundreds of megabytes without the bound) while
// franz-go produces and consumes; the heap's peak stays within a few
// times the request budget, and the legitimate client is served.
func TestHostileAmplificationBoundedHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("sends hundreds of megabytes")
	}
	const budgetBytes = 64 << 20
	budget := netlimit.NewBudget(budgetBytes)
	n := startNodeWith(t, nil, Config{Budget: budget.Door("kafka"), IdleTimeout: 2 * time.Second})
	var frames [][]byte
	for _, a := range amplifiers {
		frames = append(frames, craftFrame(a, 4<<20))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.DefaultProduceTopic("legit"), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produceAll(t, cl, "legit", 0, 10, "warm") // topic created, client connected
	base := heapObjectBytes()
	sampler := startHeapSampler()
	ctx, cancel := context.WithCancel(context.Background())
	wg, sent := hostileConns(ctx, n.addr, frames, 8)
	// The legitimate client goes on meanwhile.
	for round := 0; round < 5; round++ {
		produceAll(t, cl, "legit", 0, 50, fmt.Sprintf("r%d", round))
	}
	got := consumeN(t, n.addr, "legit", 0, 0, 260)
	// Let every crafted request arrive a few times.
	deadline := time.Now().Add(2 * time.Minute)
	for sent.Load() < int64(3*len(frames)) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d crafted requests sent", sent.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	peak := sampler.Stop()
	if len(got) < 260 {
		t.Fatalf("consumed %d of 260", len(got))
	}
	grew := int64(peak) - int64(base)
	limit := int64(4*budgetBytes + 64<<20)
	t.Logf("%d crafted requests of ~4 MiB sent on 8 connections; heap objects %d MiB before, peak %d MiB (+%d MiB, limit +%d MiB)",
		sent.Load(), base>>20, peak>>20, grew>>20, limit>>20)
	if grew > limit {
		t.Fatalf("heap grew by %d MiB under hostile requests, more than %d MiB", grew>>20, limit>>20)
	}
}

// TestBudgetBackpressure: with a budget of 1 MiB, a connection that
// declares a 900 KiB frame and sends only part of it holds the budget;
// another connection's 200 KiB request then waits, unanswered and counted
// as waiting, until the first connection goes, and is answered then.
func TestBudgetBackpressure(t *testing.T) {
	budget := netlimit.NewBudget(1 << 20)
	door := budget.Door("kafka")
	n := startNodeWith(t, nil, Config{Budget: door})
	hog, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close()
	hog.Write(binary.BigEndian.AppendUint32(nil, 900<<10))
	hog.Write(make([]byte, 1000)) // and then nothing
	waitUntil(t, "the hog's claim", func() bool { return budget.HeldBytes() >= 900<<10 })

	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName = string(make([]byte, 200<<10))
	req.ClientSoftwareVersion = "1"
	c, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(frameOf(req, 3, 42)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the request to wait for budget", func() bool { return budget.Stats()[0].Waiting == 1 })
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("answered while the budget was spent")
	}
	hog.Close() // its claim is released as its connection ends
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatalf("no answer once the budget freed: %v", err)
	}
	resp := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, resp); err != nil || binary.BigEndian.Uint32(resp) != 42 {
		t.Fatalf("answer %x: %v", resp[:min(8, len(resp))], err)
	}
	if st := budget.Stats()[0]; st.Waited != 1 {
		t.Fatalf("stats %+v", st)
	}
	waitUntil(t, "the budget to be returned", func() bool { return budget.HeldBytes() == 0 })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestBudgetNotHeldByLongPolls: long-polling Fetches, parked until data
// arrives, hold no budget, so a produce that ends their wait can always
// be read: with a budget of 64 KiB, more parked fetches than the budget
// could hold are woken by one produce.
func TestBudgetNotHeldByLongPolls(t *testing.T) {
	budget := netlimit.NewBudget(64 << 10)
	n := startNodeWith(t, nil, Config{Budget: budget.Door("kafka")})
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produceAll(t, cl, "polls", 0, 1, "first")
	const consumers = 40 // each Fetch of 2 partitions: about 3 KiB claimed while handled
	got := make(chan int, consumers)
	for i := 0; i < consumers; i++ {
		go func() {
			c, err := kgo.NewClient(kgo.SeedBrokers(n.addr),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"polls": {0: kgo.NewOffset().At(1), 1: kgo.NewOffset().At(0)}}),
				kgo.FetchMaxWait(20*time.Second))
			if err != nil {
				got <- 0
				return
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			got <- len(c.PollFetches(ctx).Records())
		}()
	}
	waitUntil(t, "the fetches to park", func() bool { return n.core.HeldWaits() >= consumers })
	produceAll(t, cl, "polls", 0, 1, "wake")
	for i := 0; i < consumers; i++ {
		if k := <-got; k != 1 {
			t.Fatalf("a parked fetch got %d records, want the one produced", k)
		}
	}
}

// TestFetchResponseCapped: a Fetch asking for a gigabyte gets at most
// Config.MaxFetchBytes of records (and one batch more at most).
func TestFetchResponseCapped(t *testing.T) {
	n := startNodeWith(t, nil, Config{MaxFetchBytes: 64 << 10})
	big := make([]byte, 20<<10)
	crand.Read(big) // incompressible
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "capped", Partition: 0, Value: big}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	req.MaxBytes = 1 << 30
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "capped"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 30
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := n.srv.handle(&request{key: 1, version: 12, body: req}).(*kmsg.FetchResponse)
	got := len(resp.Topics[0].Partitions[0].RecordBatches)
	t.Logf("%d bytes of records", got)
	if got == 0 || got > 64<<10+21<<10 {
		t.Fatalf("fetch of max_bytes 1 GiB answered %d bytes of records, cap 64 KiB", got)
	}
}
