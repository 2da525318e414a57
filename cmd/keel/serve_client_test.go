package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// TestServeWithOfficialClient runs `keel serve` with nothing but flags (the
// README's first command, on free ports) and drives it with the official Go
// client as an application would: a plain send, a delay-level send and a
// push consumer that must receive both, the delayed one no earlier than its
// level's delay.
func TestServeWithOfficialClient(t *testing.T) {
	rlog.SetLogLevel("error")
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, logs syncBuffer
	done := make(chan int, 1)
	tempDir := t.TempDir() // made before the run starts, so removed only after it stopped
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", tempDir,
			"--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", "127.0.0.1:0"}, &stdout, &logs)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not shut down:\n%s", logs.String())
		}
	}()
	ns := namesrvAddrFromLogs(t, &logs)
	waitFor(t, "the broker to register", 30*time.Second, func() bool { return brokerRegistered(t, ns, "broker-a") })

	topic := fmt.Sprintf("ServeT%d", time.Now().UnixNano()%1e9)
	p, err := producer.NewDefaultProducer(producer.WithNameServer([]string{ns}),
		producer.WithGroupName("serve-pg"), producer.WithInstanceName("serve-p"), producer.WithRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()

	var mu sync.Mutex
	got := map[string]time.Time{}
	c, err := consumer.NewPushConsumer(consumer.WithNameServer([]string{ns}),
		consumer.WithGroupName("serve-cg"), consumer.WithInstance("serve-c"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}

	plain := primitive.NewMessage(topic, []byte("plain"))
	plain.WithTag("TagA").WithKeys([]string{"order-1"})
	if r, err := p.SendSync(context.Background(), plain); err != nil || r.Status != primitive.SendOK {
		t.Fatalf("plain send: %v %v", r, err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				got[string(m.Body)] = time.Now()
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()

	delayed := primitive.NewMessage(topic, []byte("delayed"))
	delayed.WithDelayTimeLevel(1) // 1 s with the default messageDelayLevel
	sentAt := time.Now()
	if r, err := p.SendSync(context.Background(), delayed); err != nil || r.Status != primitive.SendOK {
		t.Fatalf("delayed send: %v %v", r, err)
	}
	waitFor(t, "both messages to arrive", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if early := got["delayed"].Sub(sentAt); early < time.Second {
		t.Fatalf("delay level 1 delivered after %v, before its 1 s delay", early)
	}
}
