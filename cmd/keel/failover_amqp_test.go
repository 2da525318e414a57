package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/controller"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// topicDeletedRE is the store's log line of a replica deleting an AMQP
// queue's topic as its master did.
var topicDeletedRE = regexp.MustCompile(`store: topic deleted as on the master.*topic=%AMQP%`)

// TestControllerFailoverAMQP is what AMQP clients get across an automatic
// failover, in real processes on loopback (a group of three brokers in
// controller mode, each with an AMQP door): a slave's door answers
// connection.open with 530 NOT_ALLOWED naming the master's broker and
// its AMQP address; a
// client of a master that is paused (SIGSTOP) and replaced gets
// connection.close 320 CONNECTION_FORCED once it runs again and learns
// the newer epoch; and the new master has the durable queue declared on
// the old one, with its confirmed messages.
func TestControllerFailoverAMQP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes")
	}
	brokers, amqpAddrs, group := doorFailoverCluster(t, "--amqp-listen")
	dump := func() { dumpBrokers(t, brokers) }
	g := waitMasterElected(t, brokers, group)
	memberOf := func(id controller.ReplicaID) int { return brokerOf(t, brokers, g, id) }
	firstEpoch, oldMasterID := g.MasterEpoch, g.MasterID
	oldMaster := memberOf(oldMasterID)

	// A slave's AMQP door refuses at connection.open, naming the master.
	for i := range brokers {
		if i == oldMaster {
			continue
		}
		var last error
		waitFor(t, fmt.Sprintf("slave %d's AMQP refusal naming the master", i), 20*time.Second, func() bool {
			c, err := amqp091.Dial("amqp://guest:guest@" + amqpAddrs[i] + "/")
			if err == nil {
				c.Close()
				t.Fatalf("slave %d took an AMQP connection on %s", i, amqpAddrs[i])
			}
			last = err
			var ae *amqp091.Error
			return errors.As(err, &ae) && ae.Code == amqp091.NotAllowed && strings.Contains(ae.Reason, "is a slave") &&
				strings.Contains(ae.Reason, brokers[oldMaster].addr) && strings.Contains(ae.Reason, "its AMQP address is "+amqpAddrs[oldMaster])
		})
		t.Logf("slave %d: %v", i, last)
	}

	var conn *amqp091.Connection
	waitFor(t, "the master's AMQP door", 20*time.Second, func() bool {
		var err error
		conn, err = amqp091.Dial("amqp://guest:guest@" + amqpAddrs[oldMaster] + "/")
		return err == nil
	})
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("orders", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		dc, err := ch.PublishWithDeferredConfirm("", "orders", false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatalf("publish %d nacked", i)
		}
	}

	// A durable queue with a message, deleted: its slaves delete its
	// store topic as the master did.
	if _, err := ch.QueueDeclare("temp", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if dc, err := ch.PublishWithDeferredConfirm("", "temp", false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte("x")}); err != nil || !dc.Wait() {
		t.Fatalf("publish to temp: %v", err)
	}
	if _, err := ch.QueueDelete("temp", false, false, false); err != nil {
		t.Fatal(err)
	}
	for i := range brokers {
		if i != oldMaster {
			b := brokers[i]
			waitFor(t, fmt.Sprintf("slave %d to delete the deleted queue's topic", i), 20*time.Second, func() bool {
				return topicDeletedRE.MatchString(b.proc.logs.String())
			})
		}
	}

	// Pause the master until a new one is elected, then let it run.
	p := brokers[oldMaster].proc.cmd.Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new master elected", 30*time.Second, func() bool {
		g = group()
		return g != nil && g.MasterID != 0 && g.MasterID != oldMasterID && g.MasterEpoch > firstEpoch
	})
	newMaster := memberOf(g.MasterID)
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp091.ConnectionForced || !e.Server {
			t.Fatalf("the replaced master's connection ended with %v, want 320 CONNECTION_FORCED from the server", e)
		}
		t.Logf("the replaced master closed its connection: %d %s", e.Code, e.Reason)
	case <-time.After(30 * time.Second):
		dump()
		t.Fatal("no connection.close from the replaced master within 30 s")
	}

	// The new master's door opens with the durable queue and its
	// messages (AMQP definitions travel with the log).
	var nconn *amqp091.Connection
	waitFor(t, "the new master's AMQP door", 30*time.Second, func() bool {
		var err error
		nconn, err = amqp091.Dial("amqp://guest:guest@" + amqpAddrs[newMaster] + "/")
		return err == nil
	})
	defer nconn.Close()
	nch, err := nconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	// A message the old master confirmed last may be in the new master's
	// log beyond what it showed as a slave: it is served once the new
	// master's own slave confirms it.
	var q amqp091.Queue
	deadline := time.Now().Add(20 * time.Second)
	for q.Messages < 10 {
		if q, err = nch.QueueDeclarePassive("orders", true, false, false, false, nil); err != nil {
			t.Fatalf("passive declare of the old master's durable queue on the new master: %v", err)
		}
		if time.Now().After(deadline) {
			dump()
			t.Fatalf("the new master's queue holds %d messages, want the 10 confirmed", q.Messages)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if q.Messages != 10 {
		t.Fatalf("the new master's queue holds %d messages, want the 10 confirmed", q.Messages)
	}
	if _, err := nch.QueueDeclarePassive("temp", true, false, false, false, nil); err == nil {
		t.Fatal("the deleted queue is on the new master")
	}
}
