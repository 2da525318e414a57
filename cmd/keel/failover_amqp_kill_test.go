package main

import (
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// dialAnyAMQP connects to the first of addrs that takes an AMQP
// connection, as a client given every member's address does.
func dialAnyAMQP(addrs []string) (*amqp091.Connection, string, error) {
	var last error
	for _, a := range addrs {
		c, err := amqp091.DialConfig("amqp://guest:guest@"+a+"/", amqp091.Config{Dial: amqp091.DefaultDial(time.Second)})
		if err == nil {
			return c, a, nil
		}
		last = err
	}
	return nil, "", last
}

// TestControllerFailoverAMQPKill9 is an AMQP client across kill -9 of
// the master, in real processes on loopback (a group of three brokers in
// controller mode, SYNC_MASTER, each with an AMQP door): amqp091-go
// publishes with confirms to a durable queue and consumes it with manual
// acks, leaving every fifth delivery unacknowledged; the master is
// killed; both reconnect through the three addresses they were given.
// On the new master the queue is there with every confirmed message;
// the deliveries left unacknowledged come again with redelivered=true;
// a message acknowledged before the kill comes again only if its ack
// was within the acknowledgement state's interval of the kill (then
// with redelivered=true); nothing is delivered that was not published.
// The time from the kill to the first confirm of a publish sent after
// it is logged.
func TestControllerFailoverAMQPKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes")
	}
	brokers, amqpAddrs, group := doorFailoverCluster(t, "--amqp-listen")
	dump := func() { dumpBrokers(t, brokers) }
	g := waitMasterElected(t, brokers, group)
	firstEpoch, oldMasterID := g.MasterEpoch, g.MasterID
	oldMaster := brokerOf(t, brokers, g, oldMasterID)
	waitOrDump(t, brokers, "the master's AMQP door", 20*time.Second, func() bool {
		c, _, err := dialAnyAMQP(amqpAddrs)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	const queue = "jobs"
	type pub struct{ sent, confirmed time.Time }
	type dlv struct {
		redelivered bool
		at          time.Time
	}
	var (
		mu        sync.Mutex
		published = map[int]pub{}   // every publish sent, by sequence number
		confirmed = map[int]bool{}  // ... confirmed
		delivered = map[int][]dlv{} // every delivery, by sequence number
		ackedAt   = map[int]time.Time{}
		held      = map[int]bool{} // left unacknowledged before the kill
		phantom   []string
		killAt    time.Time
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)

	// The publisher: one message at a time, each confirmed before the next.
	wg.Add(1)
	go func() {
		defer wg.Done()
		seq := 0
		for {
			select {
			case <-stop:
				return
			default:
			}
			conn, _, err := dialAnyAMQP(amqpAddrs)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			ch, err := conn.Channel()
			if err == nil {
				_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
			}
			if err == nil {
				err = ch.Confirm(false)
			}
			for err == nil {
				select {
				case <-stop:
					conn.Close()
					return
				default:
				}
				seq++
				mu.Lock()
				published[seq] = pub{sent: time.Now()}
				mu.Unlock()
				var dc *amqp091.DeferredConfirmation
				dc, err = ch.PublishWithDeferredConfirm("", queue, false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(strconv.Itoa(seq))})
				if err != nil {
					break
				}
				if ok := dc.Wait(); ok {
					mu.Lock()
					p := published[seq]
					p.confirmed = time.Now()
					published[seq], confirmed[seq] = p, true
					mu.Unlock()
				} else if ch.IsClosed() {
					err = fmt.Errorf("channel closed")
				}
			}
			conn.Close()
		}
	}()

	// The consumer: manual acks; before the kill every fifth delivery is
	// held unacknowledged.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			conn, _, err := dialAnyAMQP(amqpAddrs)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			ch, err := conn.Channel()
			var ds <-chan amqp091.Delivery
			if err == nil {
				_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
			}
			if err == nil {
				err = ch.Qos(500, 0, false)
			}
			if err == nil {
				ds, err = ch.Consume(queue, "", false, false, false, false, nil)
			}
			for err == nil {
				var d amqp091.Delivery
				var ok bool
				select {
				case <-stop:
					conn.Close()
					return
				case d, ok = <-ds:
				}
				if !ok {
					break
				}
				seq, perr := strconv.Atoi(string(d.Body))
				mu.Lock()
				if _, sent := published[seq]; perr != nil || !sent {
					phantom = append(phantom, string(d.Body))
				}
				delivered[seq] = append(delivered[seq], dlv{redelivered: d.Redelivered, at: time.Now()})
				hold := killAt.IsZero() && seq%5 == 0
				if hold {
					held[seq] = true
				}
				mu.Unlock()
				if hold {
					continue
				}
				if d.Ack(false) == nil {
					mu.Lock()
					if _, again := ackedAt[seq]; !again {
						ackedAt[seq] = time.Now()
					}
					mu.Unlock()
				}
			}
			conn.Close()
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	count := func(m map[int]bool) int { mu.Lock(); defer mu.Unlock(); return len(m) }
	waitFor(t, "300 confirmed publishes before the kill", 60*time.Second, func() bool { return count(confirmed) >= 300 })
	waitFor(t, "50 deliveries held unacknowledged", 60*time.Second, func() bool { return count(held) >= 50 })

	mu.Lock()
	killAt = time.Now()
	mu.Unlock()
	if err := brokers[oldMaster].proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-brokers[oldMaster].proc.exited
	before := count(confirmed)
	waitFor(t, "a new master elected", 30*time.Second, func() bool {
		g = group()
		return g != nil && g.MasterID != 0 && g.MasterID != oldMasterID && g.MasterEpoch > firstEpoch
	})
	waitFor(t, "300 confirmed publishes after the kill", 60*time.Second, func() bool { return count(confirmed) >= before+300 })
	close(stop)
	wg.Wait()

	// Every confirmed message delivered: read what is left with a new
	// consumer that acks everything.
	conn, addr, err := dialAnyAMQP(amqpAddrs)
	if err != nil {
		dump()
		t.Fatal(err)
	}
	defer conn.Close()
	if addr != amqpAddrs[brokerOf(t, brokers, g, g.MasterID)] {
		t.Errorf("the AMQP connection went to %s, not the new master's door", addr)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	missing := func() []int {
		mu.Lock()
		defer mu.Unlock()
		var out []int
		for seq := range confirmed {
			if len(delivered[seq]) == 0 {
				out = append(out, seq)
			}
		}
		return out
	}
	deadline := time.After(30 * time.Second)
	for len(missing()) > 0 {
		select {
		case d := <-ds:
			seq, perr := strconv.Atoi(string(d.Body))
			mu.Lock()
			if _, sent := published[seq]; perr != nil || !sent {
				phantom = append(phantom, string(d.Body))
			}
			delivered[seq] = append(delivered[seq], dlv{redelivered: d.Redelivered, at: time.Now()})
			mu.Unlock()
			d.Ack(false)
		case <-deadline:
			dump()
			m := missing()
			t.Fatalf("%d confirmed messages never delivered (e.g. %v)", len(m), m[:min(len(m), 10)])
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if len(phantom) > 0 {
		t.Errorf("delivered but never published: %q", phantom)
	}
	// Held deliveries come again, flagged.
	for seq := range held {
		again := delivered[seq][1:]
		if len(again) == 0 {
			t.Errorf("message %d, left unacknowledged before the kill, was not delivered again", seq)
			continue
		}
		if !again[0].redelivered {
			t.Errorf("message %d, left unacknowledged before the kill, came again without redelivered=true", seq)
		}
	}
	// Acked before the kill: again only within the window, flagged.
	const window = 2 * time.Second // AckStateInterval (200 ms) and its replication, with room for a loaded machine
	var againAcked int
	var oldest time.Duration
	for seq, at := range ackedAt {
		if !at.Before(killAt) {
			continue
		}
		for _, d := range delivered[seq][1:] {
			if !d.at.After(killAt) {
				continue
			}
			againAcked++
			oldest = max(oldest, killAt.Sub(at))
			if killAt.Sub(at) > window {
				t.Errorf("message %d, acknowledged %v before the kill, was delivered again", seq, killAt.Sub(at))
			}
			if !d.redelivered {
				t.Errorf("message %d, acknowledged just before the kill, came again without redelivered=true", seq)
			}
		}
	}
	var first time.Time
	for _, p := range published {
		if p.sent.After(killAt) && !p.confirmed.IsZero() && (first.IsZero() || p.confirmed.Before(first)) {
			first = p.confirmed
		}
	}
	t.Logf("kill -9 of the master to the first confirm of a publish sent after it: %v (%d confirmed before the kill, %d in all; %d held deliveries redelivered; %d acknowledged before the kill delivered again, the oldest ack %v before it)",
		first.Sub(killAt).Round(time.Millisecond), before, len(confirmed), len(held), againAcked, oldest.Round(time.Millisecond))
}
