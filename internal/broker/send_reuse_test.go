package broker

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// The send codes lend their frame buffers back to remoting when the handler
// returns (brokerHandler.BorrowsBody). Every test of this package runs with
// released buffers poisoned, so a send path that kept a slice of a request
// body past its return would store or answer PoisonByte runs.
func init() { remoting.PoisonReleasedFrames(true) }

// TestSendBodiesSurviveFrameReuse sends single messages (V1, V2, with and
// without a client UNIQ_KEY, so also through the de-duplication hook, and
// resent) and batches (plain, and de-duplicated and resent) from several
// goroutines on one
// connection, then reads every stored record back: each must hold exactly
// the bytes sent, although the buffers they arrived in were reused (and
// poisoned) as soon as each handler returned.
func TestSendBodiesSurviveFrameReuse(t *testing.T) {
	flushTypes(t, func(t *testing.T, flush store.FlushDiskType) {
		e := startEnvFlush(t, flush, nil)
		e.b.SetDeduplicator(&fakeDedup{seen: map[string]*message.Message{}})
		cl := e.dial()
		type sent struct {
			msgID string
			body  []byte
		}
		const goroutines, perG = 4, 30
		var mu sync.Mutex
		var all []sent
		errc := make(chan error, goroutines)
		before := remoting.FramePool()
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errc <- func() error {
					for i := range perG {
						mk := func(j int) []byte {
							unit := fmt.Sprintf("g%d.i%d.j%d;", g, i, j)
							return []byte(strings.Repeat(unit, 1+(g*131+i*17+j*7)%300))
						}
						var props string
						if i%2 == 0 {
							props = message.EncodeProperties(map[string]string{"UNIQ_KEY": fmt.Sprintf("K%d-%d", g, i)})
						}
						var bodies [][]byte
						var newReq func() *remoting.Command
						switch i % 3 {
						case 0:
							bodies = [][]byte{mk(0)}
							newReq = func() *remoting.Command {
								return remoting.NewRequest(remoting.ReqSendMessage, map[string]string{
									"producerGroup": "pg", "topic": "Reuse", "defaultTopic": DefaultTopic, "defaultTopicQueueNums": "4",
									"queueId": itoa(g), "sysFlag": "0", "bornTimestamp": "1", "flag": "0", "properties": props,
								}, bodies[0])
							}
						case 1:
							bodies = [][]byte{mk(0)}
							newReq = func() *remoting.Command {
								return remoting.NewRequest(remoting.ReqSendMessageV2, map[string]string{
									"a": "pg", "b": "Reuse", "c": DefaultTopic, "d": "4", "e": itoa(g), "f": "0", "g": "1", "h": "0", "i": props,
								}, bodies[0])
							}
						default:
							var items []message.BatchItem
							for j := range 8 {
								bodies = append(bodies, mk(j))
								var p string
								if i%2 == 0 {
									p = message.EncodeProperties(map[string]string{"UNIQ_KEY": fmt.Sprintf("B%d-%d-%d", g, i, j)})
								}
								items = append(items, message.BatchItem{Body: bodies[j], Properties: p})
							}
							body, err := message.EncodeBatch(items)
							if err != nil {
								return err
							}
							newReq = func() *remoting.Command {
								return remoting.NewRequest(remoting.ReqSendBatchMessage, map[string]string{
									"a": "pg", "b": "Reuse", "c": DefaultTopic, "d": "4", "e": itoa(g), "f": "0", "g": "1", "h": "0", "i": "",
								}, body)
							}
						}
						send := func() (string, error) {
							req := newReq()
							ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
							defer cancel()
							resp, err := cl.c.Invoke(ctx, req)
							if err != nil {
								return "", err
							}
							if resp.Code != remoting.ResSuccess {
								return "", fmt.Errorf("send %d: code %d %q", req.Code, resp.Code, resp.Remark)
							}
							return resp.ExtFields["msgId"], nil
						}
						msgID, err := send()
						if err != nil {
							return err
						}
						if i%2 == 0 { // a resend is answered from the de-duplication table
							again, err := send()
							if err != nil {
								return err
							}
							if again != msgID {
								return fmt.Errorf("resend answered %s, first send %s", again, msgID)
							}
						}
						ids := strings.Split(msgID, ",")
						if len(ids) != len(bodies) {
							return fmt.Errorf("%d msgIds for %d messages", len(ids), len(bodies))
						}
						mu.Lock()
						for j, id := range ids {
							all = append(all, sent{id, bodies[j]})
						}
						mu.Unlock()
					}
					return nil
				}()
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			if err != nil {
				t.Fatal(err)
			}
		}
		// A handler gives its buffer back after queueing its response; the
		// server's graceful shutdown waits for every handler.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if got := remoting.FramePool().Released - before.Released; got < goroutines*perG {
			t.Fatalf("%d request buffers released, want at least %d: the send path did not lend its buffers", got, goroutines*perG)
		}
		for _, s := range all {
			_, phys, err := message.ParseOffsetMsgID(s.msgID)
			if err != nil {
				t.Fatal(err)
			}
			m := e.storedAt(phys)
			if !bytes.Equal(m.Body, s.body) {
				t.Fatalf("stored body of %s is %.60q (%d bytes), sent %.60q (%d bytes)", s.msgID, m.Body, len(m.Body), s.body, len(s.body))
			}
		}
	})
}
