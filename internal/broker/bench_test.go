package broker

import (
	"context"
	"testing"

	"github.com/keelmq/keel/internal/remoting"
)

// The send and pull paths through the broker's handler, without the
// network: what the request processors themselves cost per request. Run
// with -benchmem; allocations per request are the figure to keep.

func BenchmarkHandleSendV2(b *testing.B) {
	e := startEnv(b, nil)
	body := make([]byte, 1024)
	ext := map[string]string{"a": "pg", "b": "BENCH", "c": DefaultTopic, "d": "4", "e": "0", "f": "0",
		"g": "1700000000000", "h": "0", "i": "", "j": "0", "k": "false", "l": "16", "m": "false"}
	req := remoting.NewRequest(remoting.ReqSendMessageV2, ext, body)
	ctx := context.Background()
	if resp := e.b.handle(ctx, nil, req); resp.Code != remoting.ResSuccess {
		b.Fatalf("send: %d %s", resp.Code, resp.Remark)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if resp := e.b.handle(ctx, nil, req); resp.Code != remoting.ResSuccess {
			b.Fatalf("send: %d %s", resp.Code, resp.Remark)
		}
	}
}

func BenchmarkHandlePull(b *testing.B) {
	e := startEnv(b, nil)
	body := make([]byte, 1024)
	ext := map[string]string{"a": "pg", "b": "BENCH", "c": DefaultTopic, "d": "4", "e": "0", "f": "0",
		"g": "1700000000000", "h": "0", "i": "", "j": "0", "k": "false", "l": "16", "m": "false"}
	ctx := context.Background()
	const n = 64
	for range n {
		req := remoting.NewRequest(remoting.ReqSendMessageV2, ext, body)
		if resp := e.b.handle(ctx, nil, req); resp.Code != remoting.ResSuccess {
			b.Fatalf("send: %d %s", resp.Code, resp.Remark)
		}
	}
	e.waitMax("BENCH", 0, n)
	pull := pullExt("g", "BENCH", 0, 0, remoting.PullFlagSubscription, 0)
	pull["subscription"] = "*"
	pull["maxMsgNums"] = "32"
	req := remoting.NewRequest(remoting.ReqPullMessage, pull, nil)
	b.SetBytes(32 * int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		resp := e.b.handle(ctx, nil, req)
		if resp.Code != remoting.ResSuccess {
			b.Fatalf("pull: %d %s", resp.Code, resp.Remark)
		}
		resp.OnWritten()
	}
}
