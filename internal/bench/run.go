package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// Options are how a workload is run (as opposed to what it does).
type Options struct {
	NamesrvAddr string // host:port of the NameServer
	// TopicPrefix names the topics: <prefix>-<workload name>-<i>.
	TopicPrefix string
	// Progress receives a line per ProgressInterval; nil: none.
	Progress         io.Writer
	ProgressInterval time.Duration // default 1 s
	// DrainTimeout bounds the wait for consumers to catch up after the
	// producers stop (produce-consume, max-rate); default 10 s.
	DrainTimeout time.Duration
	Logger       *slog.Logger
}

// Result is the outcome of a run. Send and Receive cover the measured
// window (after the warm-up); for backlog, Send is the fill and Receive
// the drain.
type Result struct {
	Workload Workload  `json:"workload"`
	Started  time.Time `json:"started"`
	Elapsed  float64   `json:"elapsed_seconds"`

	Send    *Throughput `json:"send,omitempty"`
	Receive *Throughput `json:"receive,omitempty"`

	// Totals since the start of the run, warm-up and drain included.
	TotalSent       uint64 `json:"total_sent"`
	TotalReceived   uint64 `json:"total_received"`
	TotalSendErrors uint64 `json:"total_send_errors"`
	TotalRecvErrors uint64 `json:"total_receive_errors"`
	OutOfOrder      uint64 `json:"out_of_order"` // records whose queue offset was not the next one

	// Max-rate search (mode max-rate, or rateOfMax): the highest target
	// rate that held, every step, and the rate the run was then paced at.
	MaxRate     float64      `json:"max_rate,omitempty"`
	SearchSteps []SearchStep `json:"search_steps,omitempty"`
	PacedRate   float64      `json:"paced_rate,omitempty"`

	Errors map[string]uint64 `json:"errors,omitempty"`

	// Set by the caller (keel bench): how the broker was run.
	Command string     `json:"command,omitempty"`
	Broker  BrokerInfo `json:"broker"`
}

// BrokerInfo says what the run was measured against.
type BrokerInfo struct {
	// FlushDiskType is the broker's flush type: from the embedded broker's
	// config, or as stated with --broker-flush for an external broker.
	FlushDiskType string `json:"flush_disk_type,omitempty"`
	Embedded      bool   `json:"embedded"`
	NamesrvAddr   string `json:"namesrv_addr,omitempty"`
}

// SearchStep is one rate of a max-rate search.
type SearchStep struct {
	TargetRate float64 `json:"target_rate"`
	SendRate   float64 `json:"send_rate"`
	RecvRate   float64 `json:"recv_rate"`
	E2EP99     float64 `json:"e2e_p99_ms"`
	Lag        uint64  `json:"lag"` // acknowledged but not yet received at the step's end
	Errors     uint64  `json:"errors"`
	OK         bool    `json:"ok"`
	Why        string  `json:"why,omitempty"`
}

// runner holds one run's connections and state.
type runner struct {
	w     *Workload
	opt   Options
	log   *slog.Logger
	st    *stats
	start time.Time
	group string

	ns      *remoting.Client
	read    []MessageQueue
	write   []MessageQueue
	clients []*remoting.Client // every connection, closed at the end

	producers []*producer
	acked     map[MessageQueue]*atomic.Uint64 // acknowledged messages per queue (see producer.acked)
	prodStop  chan struct{}
	prodWG    sync.WaitGroup
	consumers []*consumer
	consStop  context.CancelFunc
	consWG    sync.WaitGroup
	consDone  atomic.Int64 // consumers whose every queue reached its end
}

// Run executes the workload against the NameServer in opt and returns its
// result. A cancelled ctx stops the run early; the partial result is
// returned with ctx's error.
func Run(ctx context.Context, w Workload, opt Options) (*Result, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if w.Name == "" {
		w.Name = "workload"
	}
	opt.setDefaults()
	r := &runner{w: &w, opt: opt, log: opt.Logger, st: newStats(), start: time.Now(),
		group: fmt.Sprintf("keel-bench-%d-%d", os.Getpid(), time.Now().UnixNano())}
	defer r.closeAll()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	res := &Result{Workload: w, Started: r.start}
	err := r.runMode(ctx, res)
	r.stopProducers()
	r.stopConsumers()
	r.finish(res)
	return res, err
}

func (o *Options) setDefaults() {
	if o.TopicPrefix == "" {
		o.TopicPrefix = "keel-bench"
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

func (r *runner) runMode(ctx context.Context, res *Result) error {
	switch r.w.Mode {
	case ModeProduce:
		return r.runProduce(ctx, res)
	case ModeConsume:
		return r.runConsume(ctx, res)
	case ModeProduceConsume:
		return r.runProduceConsume(ctx, res)
	case ModeBacklog:
		return r.runBacklog(ctx, res)
	case ModeMaxRate:
		return r.runMaxRate(ctx, res)
	}
	return fmt.Errorf("bench: mode %q not handled", r.w.Mode)
}

func (r *runner) finish(res *Result) {
	res.Elapsed = time.Since(r.start).Seconds()
	res.TotalSent = r.st.sent.Load()
	res.TotalReceived = r.st.received.Load()
	res.TotalSendErrors = r.st.sendErrors.Load()
	res.TotalRecvErrors = r.st.recvErrors.Load()
	res.OutOfOrder = r.st.outOfOrder.Load()
	res.Errors = r.st.errorTable()
}

// setup creates the topics on every master broker, waits for their routes
// and dials the producer and consumer connections.
func (r *runner) setup(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second+time.Duration(r.w.Topics)*100*time.Millisecond)
	defer cancel()
	ns, err := r.dial(sctx, r.opt.NamesrvAddr)
	if err != nil {
		return err
	}
	r.ns = ns
	brokers, err := waitBrokers(sctx, ns)
	if err != nil {
		return err
	}
	if err := r.createTopics(sctx, brokers); err != nil {
		return err
	}
	for i := range r.w.Topics { // routes appear once the brokers re-register
		read, write, err := WaitRoute(sctx, ns, r.topicName(i), r.w.QueuesPerTopic*len(brokers))
		if err != nil {
			return err
		}
		r.read, r.write = append(r.read, read...), append(r.write, write...)
	}
	if err := r.dialProducers(sctx, brokers); err != nil {
		return err
	}
	return r.dialConsumers(sctx)
}

// SetupTopics creates the workload's topics on every master broker the
// NameServer in opt knows, waits for their routes and returns their names
// (what Run does first; for drivers built on other clients).
func SetupTopics(ctx context.Context, w Workload, opt Options) ([]string, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if w.Name == "" {
		w.Name = "workload"
	}
	opt.setDefaults()
	r := &runner{w: &w, opt: opt, log: opt.Logger}
	defer r.closeAll()
	w.Mode = ModeProduce // no connections for consumers
	w.Producers = 0
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	names := make([]string, w.Topics)
	for i := range names {
		names[i] = r.topicName(i)
	}
	return names, nil
}

// brokerWait bounds the wait for a broker to register with the NameServer.
const brokerWait = 30 * time.Second

// waitBrokers waits until the NameServer knows a master broker (a broker
// just started registers within moments).
func waitBrokers(ctx context.Context, ns *remoting.Client) ([]string, error) {
	deadline := time.Now().Add(brokerWait)
	for {
		brokers, err := MasterBrokers(ctx, ns)
		if err == nil || time.Now().After(deadline) {
			return brokers, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%v)", err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// createTopicsInFlight bounds the concurrent creations per broker: the
// broker writes its topic table once for all the creations that arrive
// while it is writing, so 1,000 topics cost tens of writes, not 1,000.
const createTopicsInFlight = 32

// createTopics creates (or updates) every topic on every broker over one
// connection per broker, createTopicsInFlight at a time.
func (r *runner) createTopics(ctx context.Context, brokers []string) error {
	for _, b := range brokers {
		cl, err := r.dial(ctx, b)
		if err != nil {
			return err
		}
		sem := make(chan struct{}, createTopicsInFlight)
		errs := make([]error, r.w.Topics)
		var wg sync.WaitGroup
		for i := range r.w.Topics {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				errs[i] = CreateTopic(ctx, cl, r.topicName(i), r.w.QueuesPerTopic)
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return fmt.Errorf("%w (broker %s)", err, b)
			}
		}
	}
	return nil
}

func (r *runner) topicName(i int) string {
	return r.opt.TopicPrefix + "-" + r.w.Name + "-" + strconv.Itoa(i)
}

func (r *runner) dial(ctx context.Context, addr string) (*remoting.Client, error) {
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{Logger: r.log})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	r.clients = append(r.clients, cl)
	return cl, nil
}

func (r *runner) closeAll() {
	for _, cl := range r.clients {
		cl.Close()
	}
}

// dialProducers makes, per producer, one connection to every broker with
// that broker's writable queues; the producer's senders are spread over
// its connections.
func (r *runner) dialProducers(ctx context.Context, brokers []string) error {
	if !r.w.hasProducers() {
		return nil
	}
	r.acked = make(map[MessageQueue]*atomic.Uint64, len(r.write))
	for _, q := range r.write {
		r.acked[q] = new(atomic.Uint64)
	}
	for i := range r.w.Producers {
		workers := r.w.InflightPerProducer
		if r.w.SyncSenders > 0 {
			workers = r.w.SyncSenders / r.w.Producers
			if i < r.w.SyncSenders%r.w.Producers {
				workers++
			}
		}
		for j, b := range brokers {
			n := workers / len(brokers)
			if j < workers%len(brokers) {
				n++
			}
			if n == 0 {
				continue
			}
			cl, err := r.dial(ctx, b)
			if err != nil {
				return err
			}
			p := &producer{cl: cl, queues: queuesOn(r.write, b), w: r.w, st: r.st, group: r.group, workers: n, acked: r.acked}
			p.nextQ.Store(uint64(i)) // producers start on different queues
			r.producers = append(r.producers, p)
		}
	}
	return nil
}

func queuesOn(qs []MessageQueue, broker string) []MessageQueue {
	var out []MessageQueue
	for _, q := range qs {
		if q.BrokerAddr == broker {
			out = append(out, q)
		}
	}
	return out
}

// dialConsumers splits the readable queues round-robin over the consumers;
// each consumer has one connection per broker it reads from.
func (r *runner) dialConsumers(ctx context.Context) error {
	if !r.w.hasConsumers() {
		return nil
	}
	conns := make(map[string]*remoting.Client)
	for j := range r.w.Consumers {
		clear(conns)
		for i := j; i < len(r.read); i += r.w.Consumers {
			q := r.read[i]
			cl, ok := conns[q.BrokerAddr]
			if !ok {
				var err error
				if cl, err = r.dial(ctx, q.BrokerAddr); err != nil {
					return err
				}
				conns[q.BrokerAddr] = cl
			}
			r.consumers = append(r.consumers, &consumer{cl: cl, queues: []MessageQueue{q}, w: r.w, st: r.st, group: r.group})
		}
	}
	return nil
}

// startProducers starts every producer paced at rate msg/s in total
// (0: unpaced).
func (r *runner) startProducers(rate float64) {
	r.setRate(rate)
	r.prodStop = make(chan struct{})
	for _, p := range r.producers {
		r.prodWG.Add(1)
		go func() {
			defer r.prodWG.Done()
			p.run(r.prodStop)
		}()
	}
}

// setRate paces the producers at rate msg/s in total, split by senders.
func (r *runner) setRate(rate float64) {
	total := 0
	for _, p := range r.producers {
		total += p.workers
	}
	for _, p := range r.producers {
		p.setRate(rate * float64(p.workers) / float64(total))
	}
}

// stopProducers stops sending and waits for the requests in flight.
func (r *runner) stopProducers() {
	if r.prodStop == nil {
		return
	}
	close(r.prodStop)
	r.prodWG.Wait()
	r.prodStop = nil
}

// startConsumers starts a pull loop per queue from the offset from(q);
// with until set, a loop ends at until(q).
func (r *runner) startConsumers(ctx context.Context, from, until func(MessageQueue) (int64, error)) error {
	cctx, cancel := context.WithCancel(context.Background())
	r.consStop = cancel
	for _, c := range r.consumers {
		var cursors []*queueCursor
		for _, q := range c.queues {
			cur := &queueCursor{q: q, end: -1}
			var err error
			if cur.offset, err = from(q); err == nil && until != nil {
				cur.end, err = until(q)
			}
			if err != nil {
				cancel()
				return err
			}
			cursors = append(cursors, cur)
		}
		r.consWG.Add(1)
		go func() {
			defer r.consWG.Done()
			c.run(cctx, cursors)
			if cctx.Err() == nil {
				r.consDone.Add(1)
			}
		}()
	}
	return nil
}

// stopConsumers cancels the pulls and waits for the loops.
func (r *runner) stopConsumers() {
	if r.consStop == nil {
		return
	}
	r.consStop()
	r.consWG.Wait()
	r.consStop = nil
}

// offsetOf returns a function asking the queue's broker for its min or max
// offset.
func (r *runner) offsetOf(ctx context.Context, code int16) func(MessageQueue) (int64, error) {
	conns := make(map[string]*remoting.Client)
	var mu sync.Mutex
	return func(q MessageQueue) (int64, error) {
		mu.Lock()
		cl, ok := conns[q.BrokerAddr]
		if !ok {
			var err error
			if cl, err = r.dial(ctx, q.BrokerAddr); err != nil {
				mu.Unlock()
				return 0, err
			}
			conns[q.BrokerAddr] = cl
		}
		mu.Unlock()
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return queueOffset(octx, cl, q, code)
	}
}

// errStopped is returned when the run's context ended early.
var errStopped = errors.New("bench: run stopped early")
