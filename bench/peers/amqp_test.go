package peers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// amqpDriver: amqp091-go publishers, each on its own connection with
// publisher confirms and at most inflight unconfirmed persistent messages,
// into one durable quorum queue; consumers, each on its own connection,
// take them with manual acknowledgements (one basic.ack per message,
// prefetch inflight).
type amqpDriver struct {
	wg    sync.WaitGroup
	conns []*amqp.Connection
	queue string
	url   string
	// stopped ends the confirm waits still open once stop closed the
	// connections (amqp091-go may leave a confirmation outstanding at a
	// close: one waited 5 minutes).
	stopped context.Context
	halt    context.CancelFunc
}

func (a *amqpDriver) dial() (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.Dial(a.url)
	if err != nil {
		return nil, nil, err
	}
	a.conns = append(a.conns, conn)
	ch, err := conn.Channel()
	return conn, ch, err
}

func (a *amqpDriver) start(ctx context.Context, c *config, r *recorder) error {
	a.url, a.queue = c.addr, fmt.Sprintf("peer-bench-%d", time.Now().UnixNano())
	a.stopped, a.halt = context.WithCancel(context.Background())
	_, ch, err := a.dial()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(a.queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declare: %w", err)
	}
	for range c.consumers {
		_, sub, err := a.dial()
		if err != nil {
			return err
		}
		if err := sub.Qos(c.inflight, 0, false); err != nil {
			return err
		}
		deliveries, err := sub.Consume(a.queue, "", false, false, false, false, nil)
		if err != nil {
			return err
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			for d := range deliveries {
				r.deliver(d.Body)
				if err := d.Ack(false); err != nil && ctx.Err() == nil {
					r.fail(err)
				}
			}
		}()
	}
	for range c.producers {
		_, pub, err := a.dial()
		if err != nil {
			return err
		}
		if err := pub.Confirm(false); err != nil {
			return err
		}
		window := make(chan *amqp.DeferredConfirmation, c.inflight)
		a.wg.Add(2)
		go func() {
			defer a.wg.Done()
			for dc := range window {
				if ok, err := dc.WaitContext(a.stopped); ok {
					r.ack(1)
				} else if ctx.Err() == nil {
					r.fail(errors.Join(errors.New("nacked"), err))
				}
			}
		}()
		go func() {
			defer a.wg.Done()
			defer close(window)
			for ctx.Err() == nil {
				dc, err := pub.PublishWithDeferredConfirm("", a.queue, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: r.body()})
				if err != nil {
					if ctx.Err() == nil {
						r.fail(fmt.Errorf("publish: %w", err))
					}
					return
				}
				window <- dc // blocks while inflight confirms are outstanding
			}
		}()
	}
	return nil
}

// amqpStopWait bounds each step of stop: a broker that does not answer the
// queue's delete or a connection's close does not hold the run.
const amqpStopWait = 10 * time.Second

func (a *amqpDriver) stop() {
	// Closing the connections ends the consumers' delivery channels and
	// fails the confirms still outstanding.
	if len(a.conns) > 0 {
		deleted := make(chan struct{})
		go func() {
			defer close(deleted)
			if ch, err := a.conns[0].Channel(); err == nil {
				ch.QueueDelete(a.queue, false, false, false)
			}
		}()
		select {
		case <-deleted:
		case <-time.After(amqpStopWait):
		}
	}
	for _, c := range a.conns {
		c.CloseDeadline(time.Now().Add(amqpStopWait))
	}
	if a.halt != nil {
		a.halt()
	}
	a.wg.Wait()
}
