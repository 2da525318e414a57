package remoting

import (
	"context"
	"fmt"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
)

// sendMessageRequest is a typical SEND_MESSAGE request from the Go client.
func sendMessageRequest() *Command {
	return &Command{Code: ReqSendMessage, Language: "GO", Version: 317, Opaque: 123456,
		ExtFields: map[string]string{
			"producerGroup": "ProducerGroupName", "topic": "TopicTest", "defaultTopic": "TBW102",
			"defaultTopicQueueNums": "4", "queueId": "2", "sysFlag": "0", "bornTimestamp": "1719990000123",
			"flag": "0", "properties": "KEYS\x01order-1234\x02TAGS\x01TagA\x02UNIQ_KEY\x017F0000010A8C18B4AAC2617A3C9A0000\x02WAIT\x01true\x02",
			"reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "0", "batch": "false",
		},
		Body: make([]byte, 1024)}
}

func sendMessageResponse() *Command {
	return &Command{Code: ResSuccess, Language: "JAVA", Version: Version, Opaque: 123456, Flag: FlagResponse,
		ExtFields: map[string]string{"msgId": "7F00000100002A9F00000000000BEEF0", "queueId": "2",
			"queueOffset": "987654", "transactionId": "", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}}
}

func benchEncode(b *testing.B, c *Command) {
	buf, _ := EncodeFrame(nil, c)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = EncodeFrame(buf[:0], c); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDecode(b *testing.B, c *Command) {
	frame, err := EncodeFrame(nil, c)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeFrame(frame); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeSendRequestJSON(b *testing.B)  { benchEncode(b, sendMessageRequest()) }
func BenchmarkDecodeSendRequestJSON(b *testing.B)  { benchDecode(b, sendMessageRequest()) }
func BenchmarkEncodeSendResponseJSON(b *testing.B) { benchEncode(b, sendMessageResponse()) }
func BenchmarkDecodeSendResponseJSON(b *testing.B) { benchDecode(b, sendMessageResponse()) }

func BenchmarkDecodeSendRequestBinary(b *testing.B) {
	c := sendMessageRequest()
	c.SerializeType = SerializeRocketMQ
	benchDecode(b, c)
}

func BenchmarkEncodeSendRequestBinary(b *testing.B) {
	c := sendMessageRequest()
	c.SerializeType = SerializeRocketMQ
	benchEncode(b, c)
}

// sendMessageV2Request is SEND_MESSAGE_V2 (short header keys, as the Java
// client sends it) without properties: its header is short for its 13
// fields.
func sendMessageV2Request() *Command {
	return &Command{Code: ReqSendMessageV2, Language: "JAVA", Version: 453, Opaque: 123456,
		ExtFields: map[string]string{
			"a": "ProducerGroupName", "b": "TopicTest", "c": "TBW102", "d": "4", "e": "2", "f": "0",
			"g": "1719990000123", "h": "0", "i": "", "j": "0", "k": "false", "l": "16", "m": "false",
		},
		Body: make([]byte, 1024)}
}

func BenchmarkDecodeSendRequestV2JSON(b *testing.B) { benchDecode(b, sendMessageV2Request()) }

// BenchmarkDecodeSendRequestV2JSONListed decodes the header as a server
// whose handler lists the send codes does (ExtLister).
func BenchmarkDecodeSendRequestV2JSONListed(b *testing.B) {
	frame, err := EncodeFrame(nil, sendMessageV2Request())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodePayloadFor(frame[4:], listAll{}); err != nil {
			b.Fatal(err)
		}
	}
}

// borrowAll borrows every request body and answers SUCCESS without one.
type borrowAll struct{}

func (borrowAll) BorrowsBody(int16) bool { return true }
func (borrowAll) Handle(_ context.Context, _ *Conn, req *Command) *Command {
	return req.NewResponse(ResSuccess, "")
}

func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// BenchmarkServePipelined: 64 senders share one connection to a server
// whose handler borrows the request bodies (as the broker's send codes
// do). Allocations cover both ends; goroutines/op counts the goroutines
// the process created per request (the senders are started before).
func BenchmarkServePipelined(b *testing.B) {
	for _, size := range []int{1 << 10, 32 << 10} {
		b.Run(fmt.Sprintf("body=%dKiB", size>>10), func(b *testing.B) {
			_, addr := startServer(b, ServerConfig{}, borrowAll{})
			cl := dialClient(b, addr, ClientConfig{})
			body := make([]byte, size)
			const senders = 64
			var next atomic.Int64
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, senders)
			for range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for next.Add(1) <= int64(b.N) {
						if _, err := cl.Invoke(context.Background(), NewRequest(ReqSendMessage, nil, body)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			created := goroutinesCreated()
			close(start)
			wg.Wait()
			b.ReportMetric(float64(goroutinesCreated()-created)/float64(b.N), "goroutines/op")
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkDecodeSendRequestJSONListed decodes the Go client's send
// header (its properties escaped) as the broker does (ExtLister).
func BenchmarkDecodeSendRequestJSONListed(b *testing.B) {
	frame, err := EncodeFrame(nil, sendMessageRequest())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodePayloadFor(frame[4:], listAll{}); err != nil {
			b.Fatal(err)
		}
	}
}
