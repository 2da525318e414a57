// Command transaction shows transactional messages on Keel with the
// official RocketMQ Go client: a local transaction and a message that
// either both happen or neither.
//
//	go run ./cmd/keel serve        # in one terminal
//	go run ./examples/transaction  # in another
//
// It sends three orders in transactions. Order 1 commits at once, order 2
// rolls back, and order 3's local transaction is still running when the
// send returns ("unknown"): the broker asks the producer group later
// (CHECK_TRANSACTION_STATE, after transactionTimeOut, 6 s by default) and
// the listener answers from its "database". A consumer prints what is
// delivered: orders 1 and 3, never order 2.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/keelmq/keel/examples/internal/nscheck"
)

// orders is the application's database: order id -> state.
type orders struct {
	mu    sync.Mutex
	state map[string]string // "paid", "cancelled", "pending"
}

func (o *orders) set(id, s string) {
	o.mu.Lock()
	o.state[id] = s
	o.mu.Unlock()
}

func (o *orders) get(id string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.state[id]
}

// listener runs the local transaction and answers the broker's checks.
type listener struct{ db *orders }

// ExecuteLocalTransaction runs after the half message is stored.
func (l *listener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	id := m.GetKeys()
	switch {
	case strings.HasSuffix(id, "-1"):
		l.db.set(id, "paid")
		return primitive.CommitMessageState
	case strings.HasSuffix(id, "-2"):
		l.db.set(id, "cancelled")
		return primitive.RollbackMessageState
	default:
		l.db.set(id, "pending") // finishes later, see main
		return primitive.UnkonwnState
	}
}

// CheckLocalTransaction answers the broker's question about an order.
func (l *listener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	id := m.GetKeys()
	s := l.db.get(id)
	log.Printf("broker asks about %s: %s", id, s)
	switch s {
	case "paid":
		return primitive.CommitMessageState
	case "cancelled", "":
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

// outcome says in words what a local transaction's answer does.
func outcome(s primitive.LocalTransactionState) string {
	switch s {
	case primitive.CommitMessageState:
		return "local transaction committed: the message is delivered now"
	case primitive.RollbackMessageState:
		return "local transaction rolled back: the message is discarded, never delivered"
	case primitive.UnkonwnState:
		return "local transaction still running: the broker will ask the producer later"
	}
	return fmt.Sprintf("local transaction answered %d (not a known state)", int(s))
}

// clientLog prints the RocketMQ client's errors, as the other examples do
// (rlog level "error"), except one: the client reports every local
// transaction that does not commit at once as "executeLocalTransaction but
// state unexpected", which here is the example's intent (outcome prints it).
type clientLog struct{}

func (clientLog) Debug(string, map[string]interface{})   {}
func (clientLog) Info(string, map[string]interface{})    {}
func (clientLog) Warning(string, map[string]interface{}) {}
func (clientLog) Error(msg string, fields map[string]interface{}) {
	if msg != "executeLocalTransaction but state unexpected" {
		log.Printf("rocketmq client: %s %v", msg, fields)
	}
}
func (clientLog) Fatal(msg string, fields map[string]interface{}) {
	log.Fatalf("rocketmq client: %s %v", msg, fields)
}
func (clientLog) Level(string)            {}
func (clientLog) OutputPath(string) error { return nil }

func main() {
	ns := flag.String("n", cmp.Or(os.Getenv("NAMESRV_ADDR"), "127.0.0.1:9876"), "NameServer address ($NAMESRV_ADDR when set)")
	topic := flag.String("topic", "Orders", "topic")
	flag.Parse()
	rlog.SetLogger(clientLog{})
	if err := run(*ns, *topic); err != nil {
		log.Print(nscheck.Explain(err, *ns))
		os.Exit(1)
	}
}

func run(ns, topic string) error {
	db := &orders{state: map[string]string{}}
	p, err := rocketmq.NewTransactionProducer(&listener{db: db},
		producer.WithNameServer([]string{ns}), producer.WithGroupName("example-txn-producer"))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Shutdown()

	run := fmt.Sprintf("%d", time.Now().Unix())
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("order-%s-%d", run, i)
		m := primitive.NewMessage(topic, []byte("payment for "+id))
		m.WithKeys([]string{id})
		res, err := p.SendMessageInTransaction(context.Background(), m)
		if err != nil {
			return fmt.Errorf("send %s: %w", id, err)
		}
		log.Printf("sent %s: half message stored; %s", id, outcome(res.State))
	}
	// the first send created the topic; consume it from the beginning
	got := make(chan string, 16)
	c, err := rocketmq.NewPushConsumer(consumer.WithNameServer([]string{ns}),
		consumer.WithGroupName("example-txn-consumer"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		return err
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range ms {
			if strings.HasPrefix(m.GetKeys(), "order-"+run) {
				got <- m.GetKeys()
			}
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	defer c.Shutdown()

	// order 3's payment completes a little later; the broker's check finds it
	time.Sleep(2 * time.Second)
	db.set(fmt.Sprintf("order-%s-3", run), "paid")
	log.Print("order 3 paid; waiting for the broker's check-back (transactionTimeOut)")

	want := map[string]bool{fmt.Sprintf("order-%s-1", run): true, fmt.Sprintf("order-%s-3", run): true}
	deadline := time.After(90 * time.Second)
	for len(want) > 0 {
		select {
		case id := <-got:
			if !want[id] {
				return fmt.Errorf("delivered %s, which must not be", id)
			}
			delete(want, id)
			log.Printf("consumer received %s", id)
		case <-deadline:
			return fmt.Errorf("not delivered in time: %v", want)
		}
	}
	log.Print("done: orders 1 and 3 delivered, order 2 rolled back and never delivered")
	return nil
}
