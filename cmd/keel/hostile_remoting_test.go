package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/keelmq/keel/internal/heapwatch"
)

// isConnReset reports a connection reset by the peer (a close with
// unread bytes in its receive buffer).
func isConnReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// hostileRemotingFrames are the costliest headers per byte of each type,
// as whole frames of about size bytes: a JSON header whose extFields holds
// distinct fields with empty values, and a ROCKETMQ header of empty ext
// entries (6 bytes each).
func hostileRemotingFrames(size int) (jsonFrame, binaryFrame []byte) {
	frame := func(serType byte, header []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)))
		b = binary.BigEndian.AppendUint32(b, uint32(serType)<<24|uint32(len(header)))
		return append(b, header...)
	}
	h := []byte(`{"code":10,"language":"JAVA","version":401,"opaque":1,"flag":0,"extFields":{`)
	for i := 0; len(h) < size-32; i++ {
		if i > 0 {
			h = append(h, ',')
		}
		h = append(h, '"')
		h = strconv.AppendInt(h, int64(i), 36)
		h = append(h, `":""`...)
	}
	jsonFrame = frame(0, append(h, "}}"...))
	ext := (size - 64) / 6
	bh := make([]byte, 21, 21+6*ext)
	binary.BigEndian.PutUint16(bh, 10)
	binary.BigEndian.PutUint32(bh[17:], uint32(6*ext))
	binaryFrame = frame(1, append(bh, make([]byte, 6*ext)...))
	return jsonFrame, binaryFrame
}

// TestServeRemotingHostileHeaders: eight connections at once keep sending
// 4 MiB frames of the costliest headers (JSON extFields of a million
// distinct fields; ROCKETMQ headers of 700,000 empty ext entries) to the
// broker's remoting port, while the official Go client produces and
// consumes. Each such frame is refused (the connection closed, the reason
// logged) at the cost of reading the frame, where decoding it cost 45
// MiB; the peak heap stays within a bound of a few frames per hostile
// connection (it reached 564 MiB when the headers were decoded, 124-165
// MiB since, with 31 MiB before the attack), and every message sent
// meanwhile is consumed.
func TestServeRemotingHostileHeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts keel serve and sends 100s of MiB")
	}
	rlog.SetLogLevel("error")
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, logs syncBuffer
	done := make(chan int, 1)
	tempDir := t.TempDir() // made before the run starts, so removed only after it stopped
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", tempDir,
			"--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", ""}, &stdout, &logs)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not shut down")
		}
	}()
	ns := namesrvAddrFromLogs(t, &logs)
	waitFor(t, "the broker to register", 30*time.Second, func() bool { return brokerRegistered(t, ns, "broker-a") })
	m := brokerListenRE.FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatal("no broker address in the log")
	}
	brokerAddr := strings.Replace(m[1], "[::]", "127.0.0.1", 1)

	topic := fmt.Sprintf("HostileT%d", time.Now().UnixNano()%1e9)
	p, err := producer.NewDefaultProducer(producer.WithNameServer([]string{ns}),
		producer.WithGroupName("hostile-pg"), producer.WithInstanceName("hostile-p"), producer.WithRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	var mu sync.Mutex
	got := map[string]bool{}
	c, err := consumer.NewPushConsumer(consumer.WithNameServer([]string{ns}),
		consumer.WithGroupName("hostile-cg"), consumer.WithInstance("hostile-c"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	send := func(body string) {
		t.Helper()
		if r, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(body))); err != nil || r.Status != primitive.SendOK {
			t.Fatalf("send %s: %v %v", body, r, err)
		}
	}
	send("warm-up")
	err = c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				got[string(m.Body)] = true
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
	received := func(n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == n }
	}
	waitFor(t, "the warm-up message", 60*time.Second, received(1))

	const conns, frameBytes = 8, 4 << 20
	jsonFrame, binaryFrame := hostileRemotingFrames(frameBytes)
	base := heapwatch.Now()
	stopWatch := heapwatch.Watch()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var refused, rounds [conns]atomic.Int64
	for i := range conns {
		frame := jsonFrame
		if i%2 == 1 {
			frame = binaryFrame
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				nc, err := net.Dial("tcp", brokerAddr)
				if err != nil {
					continue
				}
				nc.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := nc.Write(frame); err == nil {
					// The broker closes the connection, answering nothing
					// (a frame it decoded would be answered).
					nc.SetReadDeadline(time.Now().Add(5 * time.Second))
					var b [1]byte
					if _, err := nc.Read(b[:]); err == io.EOF || isConnReset(err) {
						refused[i].Add(1)
					}
				}
				rounds[i].Add(1)
				nc.Close()
			}
		}()
	}
	const msgs = 50
	for i := range msgs {
		send(fmt.Sprintf("m%d", i))
	}
	waitFor(t, "the messages sent under attack", 60*time.Second, received(msgs+1))
	waitFor(t, "every hostile connection to send a few frames", 60*time.Second, func() bool {
		for i := range rounds {
			if rounds[i].Load() < 3 {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()
	peak := stopWatch()
	for i := range refused {
		if r, n := refused[i].Load(), rounds[i].Load(); r != n {
			t.Errorf("hostile connection %d: %d of %d frames not refused", i, n-r, n)
		}
	}
	// Three frames per hostile connection: more than one costs now (its
	// buffer and the smaller ones it was read into as it arrived; the
	// header is refused before it is copied), far less than decoding one
	// cost (11 bytes per header byte). The collector lets the heap grow to
	// twice what was live at the last collection before it collects again
	// (GOGC=100).
	bound := 2 * (base + conns*3*frameBytes)
	t.Logf("heap %d MiB before, peak %d MiB under %d hostile connections of %d MiB frames (bound %d MiB)",
		base>>20, peak>>20, conns, frameBytes>>20, bound>>20)
	if peak > bound {
		t.Fatalf("peak heap %d MiB, above the bound of %d MiB (%d MiB before the attack)", peak>>20, bound>>20, base>>20)
	}
	if l := logs.String(); !strings.Contains(l, "more than 256 extFields") || !strings.Contains(l, "more than 256 ext fields") {
		t.Fatal("the broker did not log why it closed the hostile connections")
	}
}
