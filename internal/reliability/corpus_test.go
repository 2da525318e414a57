package reliability

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/vfs"
)

// frameRecorder keeps up to perCode request frames of each request code the
// broker receives.
type frameRecorder struct {
	perCode int
	mu      sync.Mutex
	frames  map[int16][][]byte
}

func (r *frameRecorder) wrap(h remoting.Handler) remoting.Handler {
	return remoting.HandlerFunc(func(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
		if f, err := remoting.EncodeFrame(nil, req); err == nil {
			r.mu.Lock()
			if len(r.frames[req.Code]) < r.perCode {
				r.frames[req.Code] = append(r.frames[req.Code], f)
			}
			r.mu.Unlock()
		}
		return h.Handle(ctx, c, req)
	})
}

// TestWriteBrokerCorpus records the request frames the official Go client
// sends to a broker (producer: sync, batch, delayed, oneway sends; push
// consumer: heartbeats, pulls, offsets, a send-back; orderly locks) as the
// seed corpus of FuzzBrokerRequest. Run with KEEL_WRITE_CORPUS=1.
func TestWriteBrokerCorpus(t *testing.T) {
	if os.Getenv("KEEL_WRITE_CORPUS") != "1" {
		t.Skip("set KEEL_WRITE_CORPUS=1 to regenerate testdata/fuzz/FuzzBrokerRequest")
	}
	ns := namesrv.New(namesrv.Config{})
	nsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nsSrv := remoting.NewServer(remoting.ServerConfig{OnConnClose: ns.OnConnClose}, ns.Handler())
	go nsSrv.Serve(nsLn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ns.Run(ctx)
	defer func() {
		c, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		nsSrv.Shutdown(c)
		ns.Close()
	}()
	nsAddr := nsLn.Addr().String()

	rec := &frameRecorder{perCode: 3, frames: map[int16][][]byte{}}
	mem := vfs.NewMem()
	mem.MkdirAll(plDir, 0o755)
	n := mustOpenNode(t, mem, plDir, nodeOptions{wrap: rec.wrap,
		brokerCfg: func(c *broker.Config) { c.NamesrvAddrs = []string{nsAddr} }})
	createTopicOn(t, n, "CorpusT", 4)
	waitFor(t, 30*time.Second, "route", func() bool {
		resp, err := invoke(nsAddr, remoting.ReqGetRouteInfoByTopic, map[string]string{"topic": "CorpusT"}, nil)
		return err == nil && resp.Code == remoting.ResSuccess
	})
	driveGoClient(t, nsAddr)

	dir := filepath.Join("testdata", "fuzz", "FuzzBrokerRequest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	files := 0
	for code, frames := range rec.frames {
		for i, f := range frames {
			body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(f)) + ")\n"
			name := fmt.Sprintf("go-client-%s-%d", remoting.RequestCode(code), i)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			files++
		}
	}
	t.Logf("wrote %d seed frames of %d request codes to %s", files, len(rec.frames), dir)
}

// driveGoClient runs the Go client's common flows against the cluster.
func driveGoClient(t *testing.T, nsAddr string) {
	t.Helper()
	p, err := producer.NewDefaultProducer(producer.WithNameServer(primitive.NamesrvAddr{nsAddr}),
		producer.WithGroupName("pg-corpus"), producer.WithRetry(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	ctx := context.Background()
	m := primitive.NewMessage("CorpusT", []byte("hello")).WithTag("tagA").WithKeys([]string{"key1", "key2"})
	if _, err := p.SendSync(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendSync(ctx, primitive.NewMessage("CorpusT", []byte("b1")), primitive.NewMessage("CorpusT", []byte("b2"))); err != nil {
		t.Fatal(err)
	}
	d := primitive.NewMessage("CorpusT", []byte("delayed"))
	d.WithDelayTimeLevel(1)
	if _, err := p.SendSync(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := p.SendOneWay(ctx, primitive.NewMessage("CorpusT", []byte("oneway"))); err != nil {
		t.Fatal(err)
	}

	var got, retried atomic.Int64
	c, err := consumer.NewPushConsumer(consumer.WithNameServer(primitive.NamesrvAddr{nsAddr}),
		consumer.WithGroupName("cg-corpus"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe("CorpusT", consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			if retried.Add(1) == 1 {
				return consumer.ConsumeRetryLater, nil // one send-back
			}
			got.Add(int64(len(msgs)))
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "consumption", func() bool { return got.Load() >= 4 })
	c.Shutdown()

	oc, err := consumer.NewPushConsumer(consumer.WithNameServer(primitive.NamesrvAddr{nsAddr}),
		consumer.WithGroupName("cg-corpus-orderly"), consumer.WithConsumerOrder(true),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	var ordered atomic.Int64
	oc.Subscribe("CorpusT", consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		ordered.Add(int64(len(msgs)))
		return consumer.ConsumeSuccess, nil
	})
	if err := oc.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "orderly consumption", func() bool { return ordered.Load() >= 4 })
	oc.Shutdown()
}
