package broker

import (
	"context"
	"testing"

	"github.com/keelmq/keel/internal/remoting"
)

// TestSendAllocations bounds what a single-message send allocates in the
// broker's handler (BenchmarkHandleSendV2's request, its fields as the
// decoder lists them): its message, message list and response are made in
// its sendCall (9 allocations per send before, 5 after).
func TestSendAllocations(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation count")
	}
	e := startEnv(t, nil)
	body := make([]byte, 1024)
	req := &remoting.Command{Code: remoting.ReqSendMessageV2, Language: "GO", Body: body}
	for _, kv := range [][2]string{{"a", "pg"}, {"b", "ALLOCS"}, {"c", DefaultTopic}, {"d", "4"}, {"e", "0"}, {"f", "0"},
		{"g", "1700000000000"}, {"h", "0"}, {"i", ""}, {"j", "0"}, {"k", "false"}, {"l", "16"}, {"m", "false"}} {
		req.AddExt(kv[0], kv[1])
	}
	ctx := context.Background()
	send := func() {
		if resp := e.b.handle(ctx, nil, req); resp.Code != remoting.ResSuccess {
			t.Fatalf("send: %d %s", resp.Code, resp.Remark)
		}
	}
	send()
	const maxAllocs = 6
	if n := testing.AllocsPerRun(500, send); n > maxAllocs {
		t.Fatalf("a send allocates %.1f times in the handler, want at most %d", n, maxAllocs)
	}
}
