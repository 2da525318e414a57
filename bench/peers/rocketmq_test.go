package peers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// rocketDriver: the official RocketMQ Go client. Producers, each its own
// client instance, send asynchronously with at most inflight sends
// outstanding (round robin over the topic's queues, as the client does);
// push consumers of one group (clustering) share the queues.
type rocketDriver struct {
	wg        sync.WaitGroup
	producers []rocketmq.Producer
	consumers []rocketmq.PushConsumer
}

func (d *rocketDriver) start(ctx context.Context, c *config, r *recorder) error {
	rlog.SetLogLevel("error")
	if c.topic == "" {
		return errors.New("KEEL_PEER_TOPIC: the rocketmq driver sends to a topic the script creates")
	}
	ns := primitive.NewPassthroughResolver([]string{c.addr})
	group := fmt.Sprintf("peer-bench-%d", time.Now().UnixNano())
	for i := range c.consumers {
		pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(ns), consumer.WithGroupName(group),
			consumer.WithInstance(fmt.Sprintf("peer-%d-c%d", os.Getpid(), i)), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
		if err != nil {
			return err
		}
		err = pc.Subscribe(c.topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range msgs {
				r.deliver(m.Body)
			}
			return consumer.ConsumeSuccess, nil
		})
		if err != nil {
			return err
		}
		if err := pc.Start(); err != nil {
			return err
		}
		d.consumers = append(d.consumers, pc)
	}
	for i := range c.producers {
		p, err := rocketmq.NewProducer(producer.WithNsResolver(ns), producer.WithGroupName(group),
			producer.WithInstanceName(fmt.Sprintf("peer-%d-p%d", os.Getpid(), i)), producer.WithRetry(0), producer.WithSendMsgTimeout(30*time.Second))
		if err != nil {
			return err
		}
		if err := p.Start(); err != nil {
			return err
		}
		d.producers = append(d.producers, p)
		window := make(chan struct{}, c.inflight)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			var sends sync.WaitGroup
			defer sends.Wait()
			for {
				select {
				case <-ctx.Done():
					return
				case window <- struct{}{}:
				}
				sends.Add(1)
				done := func(_ context.Context, res *primitive.SendResult, err error) {
					defer sends.Done()
					defer func() { <-window }()
					switch {
					case err == nil && res.Status == primitive.SendOK:
						r.ack(1)
					case ctx.Err() != nil:
					case err != nil:
						r.fail(err)
					default:
						r.fail(fmt.Errorf("send status %d", res.Status))
					}
				}
				if err := p.SendAsync(context.Background(), done, primitive.NewMessage(c.topic, r.body())); err != nil {
					done(ctx, nil, err)
				}
			}
		}()
	}
	return nil
}

func (d *rocketDriver) stop() {
	d.wg.Wait()
	for _, p := range d.producers {
		p.Shutdown()
	}
	for _, pc := range d.consumers {
		pc.Shutdown()
	}
}
