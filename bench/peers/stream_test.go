package peers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

// streamDriver: RabbitMQ's stream client. One stream per producer (a
// stream has no competing consumers: each consumer reads a whole stream,
// so the streams stand for partitions); producer i sends to stream i with
// at most inflight unconfirmed messages (the client batches as it does by
// default), consumer i reads stream i from its first offset.
type streamDriver struct {
	wg        sync.WaitGroup
	env       *stream.Environment
	producers []*stream.Producer
	consumers []*stream.Consumer
	streams   []string
}

func (s *streamDriver) start(ctx context.Context, c *config, r *recorder) error {
	env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetUri(c.addr).
		// The client's default 8 KiB socket buffers hold a consumer to about
		// 75 KB/s here; 0 leaves them to the kernel, as the other clients do.
		SetReadBuffer(0).SetWriteBuffer(0))
	if err != nil {
		return err
	}
	s.env = env
	base := fmt.Sprintf("peer-bench-%d", time.Now().UnixNano())
	n := max(c.producers, c.consumers)
	for i := range n {
		name := fmt.Sprintf("%s-%d", base, i)
		if err := env.DeclareStream(name, stream.NewStreamOptions()); err != nil {
			return fmt.Errorf("declare stream: %w", err)
		}
		s.streams = append(s.streams, name)
	}
	for i := range c.consumers {
		cons, err := env.NewConsumer(s.streams[i], func(_ stream.ConsumerContext, m *amqp.Message) { r.deliver(m.GetData()) },
			stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
		if err != nil {
			return err
		}
		s.consumers = append(s.consumers, cons)
	}
	for i := range c.producers {
		p, err := env.NewProducer(s.streams[i], stream.NewProducerOptions())
		if err != nil {
			return err
		}
		s.producers = append(s.producers, p)
		window := make(chan struct{}, c.inflight)
		confirms := p.NotifyPublishConfirmation()
		s.wg.Add(2)
		go func() {
			defer s.wg.Done()
			for batch := range confirms {
				for _, st := range batch {
					if st.IsConfirmed() {
						r.ack(1)
					} else if ctx.Err() == nil {
						r.fail(fmt.Errorf("not confirmed: %v", st.GetError()))
					}
					select {
					case <-window:
					default:
					}
				}
			}
		}()
		go func() {
			defer s.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case window <- struct{}{}: // blocks while inflight are unconfirmed
				}
				if err := p.Send(amqp.NewMessage(r.body())); err != nil {
					if ctx.Err() == nil {
						r.fail(fmt.Errorf("send: %w", err))
					}
					return
				}
			}
		}()
	}
	return nil
}

func (s *streamDriver) stop() {
	// Closing a producer closes its confirmation channel.
	for _, p := range s.producers {
		p.Close()
	}
	for _, c := range s.consumers {
		c.Close()
	}
	s.wg.Wait()
	if s.env != nil {
		for _, name := range s.streams {
			s.env.DeleteStream(name)
		}
		s.env.Close()
	}
}
