package wire

import (
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"testing"
)

// allocatedBytes returns the heap bytes f allocated: the least of three
// runs, since the count is the process's and goroutines other tests left
// running may allocate meanwhile.
func allocatedBytes(f func()) uint64 {
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// checkAllocBound fails t when decode allocated more than the bound for
// wireBytes: TableAllocPerByte per byte and TableAllocSlackBytes, with
// room for what decoding the frame costs around its table (one copy of
// the payload, the method or header itself).
func checkAllocBound(t testing.TB, what string, wireBytes int, decode func()) float64 {
	t.Helper()
	n := allocatedBytes(decode)
	if limit := uint64((TableAllocPerByte+2)*wireBytes + TableAllocSlackBytes + 4096); n > limit {
		t.Fatalf("%s: %d bytes allocated %d (%.1f per byte), above the bound of %d", what, wireBytes, n,
			float64(n)/float64(max(1, wireBytes)), limit)
	}
	return float64(n) / float64(max(1, wireBytes))
}

// tableOf returns a field table of n copies of the entry that entry(i)
// appends.
func tableOf(n int, entry func(b []byte, i int) []byte) []byte {
	b := make([]byte, 4)
	for i := range n {
		b = entry(b, i)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// arrayOf is a table of one field "a", an array of n copies of elem.
func arrayOf(n int, elem ...byte) []byte {
	return tableOf(1, func(b []byte, _ int) []byte {
		b = append(b, 1, 'a', 'A', 0, 0, 0, 0)
		at := len(b)
		for range n {
			b = append(b, elem...)
		}
		binary.BigEndian.PutUint32(b[at-4:], uint32(len(b)-at))
		return b
	})
}

// nested is a table of one field nested depth tables deep.
func nested(depth int) []byte {
	b := []byte{0, 0, 0, 0}
	for range depth {
		inner := b
		b = binary.BigEndian.AppendUint32(nil, uint32(3+len(inner)))
		b = append(b, 1, 'n', 'F')
		b = append(b, inner...)
	}
	return b
}

// hostileTables are the shapes that cost the most heap per wire byte,
// each as a function of its entry count.
var hostileTables = map[string]func(n int) []byte{
	"void fields, distinct keys": func(n int) []byte {
		return tableOf(n, func(b []byte, i int) []byte { return append(b, 2, byte(i>>8), byte(i), 'V') })
	},
	"empty-table fields": func(n int) []byte {
		return tableOf(n, func(b []byte, i int) []byte { return append(b, 2, byte(i>>8), byte(i), 'F', 0, 0, 0, 0) })
	},
	"long-key fields": func(n int) []byte {
		return tableOf(n, func(b []byte, i int) []byte {
			b = append(b, 255, byte(i>>8), byte(i))
			return append(append(b, make([]byte, 253)...), 'V')
		})
	},
	"int64 fields": func(n int) []byte {
		return tableOf(n, func(b []byte, i int) []byte { return append(b, 2, byte(i>>8), byte(i), 'l', 0, 0, 0, 0, 0, 0, 1, 0) })
	},
	"empty-string fields": func(n int) []byte {
		return tableOf(n, func(b []byte, i int) []byte { return append(b, 2, byte(i>>8), byte(i), 'S', 0, 0, 0, 0) })
	},
	"void elements":         func(n int) []byte { return arrayOf(n, 'V') },
	"bool elements":         func(n int) []byte { return arrayOf(n, 't', 1) },
	"int64 elements":        func(n int) []byte { return arrayOf(n, 'l', 0, 0, 0, 0, 0, 0, 1, 0) },
	"empty-table elements":  func(n int) []byte { return arrayOf(n, 'F', 0, 0, 0, 0) },
	"empty-array elements":  func(n int) []byte { return arrayOf(n, 'A', 0, 0, 0, 0) },
	"empty-binary elements": func(n int) []byte { return arrayOf(n, 'x', 0, 0, 0, 0) },
	"decimal elements":      func(n int) []byte { return arrayOf(n, 'D', 2, 0, 0, 1, 0) },
}

// TestTableDecodeCostBounded checks the cost model: every hostile shape,
// from a few entries to far past what its allowance admits, allocates
// within the bound whether it decodes or is refused (and a refusal is
// ErrMalformed).
func TestTableDecodeCostBounded(t *testing.T) {
	for name, shape := range hostileTables {
		last, refusedAt := 0.0, 0
		for n := 1; n <= 1<<16; n *= 2 {
			data := shape(n)
			var err error
			per := checkAllocBound(t, name, len(data), func() {
				r := NewReader(data)
				r.Table()
				err = r.Err()
			})
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("%s of %d: %v", name, n, err)
				}
				if refusedAt == 0 {
					refusedAt = n
				}
			} else {
				last = per
			}
		}
		t.Logf("%-26s refused from %5d entries; the largest decoded allocated %.1f bytes per wire byte", name, refusedAt, last)
	}
}

func TestTableDepthBounded(t *testing.T) {
	// nested(d) is d+1 tables, one in the other.
	r := NewReader(nested(MaxTableDepth - 1))
	if r.Table(); r.Err() != nil {
		t.Fatalf("%d levels: %v", MaxTableDepth, r.Err())
	}
	r = NewReader(nested(MaxTableDepth))
	if r.Table(); !errors.Is(r.Err(), ErrMalformed) {
		t.Fatalf("%d levels: %v", MaxTableDepth+1, r.Err())
	}
}

// Real tables fit their allowance with room to spare: an x-death header
// of 200 deaths (each a table of seven fields) and a client's properties.
func TestRealTablesDecode(t *testing.T) {
	var deaths []any
	for i := range 200 {
		deaths = append(deaths, Table{"count": int64(i), "reason": "rejected", "queue": "orders.retry",
			"time": Timestamp(1700000000), "exchange": "orders", "routing-keys": []any{"orders.created"},
			"original-expiration": "60000"})
	}
	args := Table{"x-message-ttl": int32(60000), "x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead",
		"x-max-length": int64(100000), "x-overflow": "reject-publish", "x-queue-type": "classic"}
	for name, tb := range map[string]Table{
		"queue arguments": args,
		"x-death":         {"x-death": deaths, "x-first-death-queue": "orders", "x-first-death-reason": "rejected"},
		"client properties": {"product": "Keel test", "version": "1.0", "platform": "Go", "connection_name": "c",
			"capabilities": Table{"publisher_confirms": true, "exchange_exchange_bindings": true, "basic.nack": true,
				"consumer_cancel_notify": true, "connection.blocked": true, "authentication_failure_close": true,
				"per_consumer_qos": true, "direct_reply_to": true}},
	} {
		var w Writer
		w.Table(tb)
		var got Table
		var err error
		per := checkAllocBound(t, name, len(w.Buf), func() {
			r := NewReader(w.Buf)
			got, err = r.Table(), r.Err()
		})
		if err != nil || len(got) != len(tb) {
			t.Fatalf("%s (%d bytes): %v", name, len(w.Buf), err)
		}
		t.Logf("%s: %d bytes, %.1f bytes allocated per byte", name, len(w.Buf), per)
	}
}
