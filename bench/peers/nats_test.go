package peers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsDriver: nats.go's JetStream API. A file-stored stream of one
// replica takes subject bench.<producer>; producers, each on its own
// connection, publish asynchronously with at most inflight acks pending;
// consumers, each on its own connection, share one durable pull consumer
// (explicit acks, one per message).
type natsDriver struct {
	wg     sync.WaitGroup
	conns  []*nats.Conn
	ccs    []jetstream.ConsumeContext
	js     jetstream.JetStream
	stream string
}

func (n *natsDriver) start(ctx context.Context, c *config, r *recorder) error {
	conn := func() (*nats.Conn, jetstream.JetStream, error) {
		nc, err := nats.Connect(c.addr)
		if err != nil {
			return nil, nil, err
		}
		n.conns = append(n.conns, nc)
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(c.inflight))
		return nc, js, err
	}
	_, js, err := conn()
	if err != nil {
		return err
	}
	n.js, n.stream = js, fmt.Sprintf("peerbench%d", time.Now().UnixNano())
	subject := n.stream + ".>"
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(cctx, jetstream.StreamConfig{Name: n.stream, Subjects: []string{subject}, Storage: jetstream.FileStorage, Replicas: 1})
	if err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	if _, err := st.CreateOrUpdateConsumer(cctx, jetstream.ConsumerConfig{Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	for range c.consumers {
		_, cjs, err := conn()
		if err != nil {
			return err
		}
		cons, err := cjs.Consumer(cctx, n.stream, "bench")
		if err != nil {
			return err
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			r.deliver(m.Data())
			if err := m.Ack(); err != nil && ctx.Err() == nil {
				r.fail(fmt.Errorf("ack: %w", err))
			}
		})
		if err != nil {
			return err
		}
		n.ccs = append(n.ccs, cc)
	}
	for i := range c.producers {
		_, pjs, err := conn()
		if err != nil {
			return err
		}
		subj := fmt.Sprintf("%s.%d", n.stream, i)
		// A slot is taken before a publish and given back when its ack
		// (or error) has come, so the client's own limit is never hit.
		slots := make(chan struct{}, c.inflight)
		futures := make(chan jetstream.PubAckFuture, c.inflight)
		n.wg.Add(2)
		go func() {
			defer n.wg.Done()
			for f := range futures {
				select {
				case <-f.Ok():
					r.ack(1)
				case err := <-f.Err():
					if ctx.Err() == nil {
						r.fail(err)
					}
				}
				<-slots
			}
		}()
		go func() {
			defer n.wg.Done()
			defer close(futures)
			for {
				select {
				case <-ctx.Done():
					return
				case slots <- struct{}{}: // blocks while inflight acks are pending
				}
				f, err := pjs.PublishAsync(subj, r.body())
				if err != nil {
					if ctx.Err() == nil {
						r.fail(fmt.Errorf("publish: %w", err))
					}
					return
				}
				futures <- f
			}
		}()
	}
	return nil
}

func (n *natsDriver) stop() {
	for _, cc := range n.ccs {
		cc.Stop()
	}
	// The producers' waiters see every future resolved (acked, or failed
	// when its connection closes).
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	if n.js != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n.js.DeleteStream(ctx, n.stream)
		cancel()
	}
	for _, nc := range n.conns {
		nc.Close()
	}
	n.wg.Wait()
}
