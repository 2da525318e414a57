package broker

import (
	"runtime"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// TestBatchOfManyEmptyMessages: a batch body of empty items (22 bytes
// each on the wire, each a decoded message and a stored record) is bounded
// by its count: MaxBatchMessages are stored, one more is refused before
// anything is decoded; and what a batch allocates is its count times a
// message, once (the slab is sized from the count, not doubled as it fills:
// a 4 MiB body of 190,000 empty items cost 203 MiB before).
func TestBatchOfManyEmptyMessages(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	batch := func(n int) []byte {
		items := make([]message.BatchItem, n)
		body, err := message.EncodeBatch(items)
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	hdr := map[string]string{"a": "pg", "b": "TMany", "c": DefaultTopic, "d": "4", "e": "0", "f": "0", "g": "1", "h": "0", "i": "", "j": "0", "k": "false", "m": "true"}
	over := batch(message.MaxBatchMessages + 1)
	resp := cl.invoke(remoting.ReqSendBatchMessage, hdr, over)
	wantCode(t, resp, remoting.ResMessageIllegal)
	if e.b.Store().MaxOffset("TMany", 0) != 0 {
		t.Fatal("a refused batch stored messages")
	}
	full := batch(message.MaxBatchMessages)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp = cl.invoke(remoting.ReqSendBatchMessage, hdr, full)
	runtime.ReadMemStats(&after)
	wantCode(t, resp, remoting.ResSuccess)
	e.waitMax("TMany", 0, message.MaxBatchMessages)
	// Client, server and store share this process: the whole exchange is
	// counted. 2 KiB per message covers the request, the decoded messages,
	// the stored records, the index and the response's message ids.
	per := (after.TotalAlloc - before.TotalAlloc) / message.MaxBatchMessages
	t.Logf("%d empty messages in a %d-byte batch: %d bytes allocated per message", message.MaxBatchMessages, len(full), per)
	if per > 2048 {
		t.Fatalf("%d bytes allocated per message of the batch, above 2 KiB", per)
	}
}
