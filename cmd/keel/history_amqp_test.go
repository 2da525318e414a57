package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/history"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// amqpHistory is amqp091-go: a publisher with confirms (one message at a
// time) and a consumer with manual acks on one durable queue, each
// reconnecting through every member's AMQP address when its connection
// ends, as a client given the group's addresses does. AMQP shows no
// queue offsets: its sends and deliveries are recorded without them, so
// the checker matches them by id and checksum only.
type amqpHistory struct {
	done   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// amqpHistoryGroup names the consumer in the history.
const amqpHistoryGroup = "hist-ag"

func startAMQPHistory(t *testing.T, addrs []string, queue string, h *history.History) *amqpHistory {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &amqpHistory{done: make(chan struct{}), cancel: cancel}
	// setup opens a channel on any member that serves AMQP with the queue
	// declared (the master; a slave refuses at connection.open).
	setup := func() (*amqp091.Connection, *amqp091.Channel, error) {
		conn, _, err := dialAnyAMQP(addrs)
		if err != nil {
			return nil, nil, err
		}
		ch, err := conn.Channel()
		if err == nil {
			_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
		}
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		return conn, ch, nil
	}
	a.wg.Add(2)
	go func() { // the consumer
		defer a.wg.Done()
		for ctx.Err() == nil {
			conn, ch, err := setup()
			var ds <-chan amqp091.Delivery
			if err == nil {
				if err = ch.Qos(100, 0, false); err == nil {
					ds, err = ch.Consume(queue, "hist-ac", false, false, false, false, nil)
				}
			}
			for err == nil {
				var d amqp091.Delivery
				var ok bool
				select {
				case <-ctx.Done():
					err = ctx.Err()
					continue
				case d, ok = <-ds:
				}
				if !ok {
					err = errors.New("deliveries ended")
					continue
				}
				h.AddDelivery("amqp", amqpHistoryGroup, queue, -1, d.Body, time.Now())
				err = d.Ack(false)
			}
			if conn != nil {
				conn.Close()
			}
			if ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond) // do not spin on a dead member
			}
		}
	}()
	go func() { // the publisher
		defer a.wg.Done()
		seq := 0
		for {
			conn, ch, err := setup()
			if err == nil {
				err = ch.Confirm(false)
			}
			for err == nil {
				select {
				case <-a.done:
					conn.Close()
					return
				default:
				}
				id := fmt.Sprintf("a-%06d", seq)
				body := historyBody(id, seq)
				seq++
				s := history.Send{Family: "amqp", ID: id, Sum: history.Checksum(body), Start: time.Now(), Offset: -1}
				var dc *amqp091.DeferredConfirmation
				dc, err = ch.PublishWithDeferredConfirm("", queue, false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: body})
				if err == nil {
					// A confirm that does not come within 10 s (a paused
					// master) counts as not acknowledged; the connection
					// is dropped and made again.
					wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
					var acked bool
					acked, err = dc.WaitContext(wctx)
					wcancel()
					if err == nil && !acked {
						err = errors.New("nacked")
					}
					s.Acked = err == nil
				}
				s.End = time.Now()
				if err != nil {
					s.Err = err.Error()
				}
				h.AddSend(s)
			}
			if conn != nil {
				conn.Close()
			}
			select {
			case <-a.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return a
}

func (a *amqpHistory) family() string   { return "amqp" }
func (a *amqpHistory) groups() []string { return []string{amqpHistoryGroup} }
func (a *amqpHistory) stop() {
	select {
	case <-a.done:
	default:
		close(a.done)
	}
}
func (a *amqpHistory) close() {
	a.stop()
	a.cancel()
	a.wg.Wait()
}
