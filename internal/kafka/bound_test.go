package kafka

import (
	"errors"
	"math/rand"
	"reflect"
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// fillRandom sets every exported field of v (a kmsg struct) to a random
// value: arrays of 0-3 elements, strings of 0-6 bytes, nil pointers and
// slices now and then, and sometimes unknown tagged fields.
func fillRandom(rng *rand.Rand, v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(rng.Uint64())) // truncated to the field's width
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(rng.Uint64())
	case reflect.Bool:
		v.SetBool(rng.Intn(2) == 0)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(rng.Float64())
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fillRandom(rng, v.Index(i), depth+1)
		}
	case reflect.String:
		v.SetString(randString(rng))
	case reflect.Pointer:
		if rng.Intn(3) == 0 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fillRandom(rng, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if rng.Intn(4) == 0 {
			return // nil
		}
		n := rng.Intn(4)
		if depth < 3 && rng.Intn(6) == 0 {
			n = 30 + rng.Intn(60) // long enough that element costs dominate
		}
		if depth > 6 {
			n = 0
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			n = rng.Intn(40)
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := 0; i < n; i++ {
			fillRandom(rng, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Struct:
		if v.Type() == tagsType {
			if rng.Intn(4) == 0 {
				t := v.Addr().Interface().(*kmsg.Tags)
				for i := rng.Intn(3); i >= 0; i-- {
					t.Set(uint32(1000+rng.Intn(50)), []byte(randString(rng)))
				}
			}
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() && v.Type().Field(i).Name != "Version" {
				fillRandom(rng, v.Field(i), depth+1)
			}
		}
	}
}

func randString(rng *rand.Rand) string {
	b := make([]byte, rng.Intn(7))
	for i := range b {
		b[i] = byte('a' + rng.Intn(26))
	}
	return string(b)
}

// allocatedBy returns the heap bytes f allocates: the least of three
// runs, so that another goroutine's allocation in the window is not
// counted.
func allocatedBy(f func()) uint64 {
	if raceEnabled {
		f()
		return 0 // the race detector's allocations are not the program's
	}
	least := uint64(1 << 63)
	for i := 0; i < 3; i++ {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// TestPrepassMatchesKmsg encodes random requests of every served API and
// version with kmsg and checks that the walk reads exactly the bytes kmsg
// wrote and that its cost is at least what kmsg's ReadFrom allocates.
func TestPrepassMatchesKmsg(t *testing.T) {
	seed := int64(20261201)
	rng := rand.New(rand.NewSource(seed))
	for _, key := range sortedAPIKeys {
		r := apis[key]
		for v := r.min; v <= r.max; v++ {
			for i := 0; i < 25; i++ {
				req := kmsg.RequestForKey(key)
				fillRandom(rng, reflect.ValueOf(req).Elem(), 0)
				req.SetVersion(v)
				wire := req.AppendTo(nil)
				p := &prepass{b: wire, flexible: req.IsFlexible(), limit: 1 << 40}
				if err := p.walk(schemaFor(req)); err != nil {
					t.Fatalf("seed %d: %s v%d: walk of kmsg's encoding failed: %v", seed, kmsg.NameForKey(key), v, err)
				}
				if len(p.b) != 0 {
					t.Fatalf("seed %d: %s v%d: walk left %d of %d bytes", seed, kmsg.NameForKey(key), v, len(p.b), len(wire))
				}
				cost, _, err := prepassCost(req, wire)
				if err != nil {
					t.Fatalf("seed %d: %s v%d: %v", seed, kmsg.NameForKey(key), v, err)
				}
				var derr error
				got := allocatedBy(func() {
					fresh := kmsg.RequestForKey(key) // counted: the prepass counts the request value
					fresh.SetVersion(v)
					derr = fresh.ReadFrom(wire)
				})
				if derr != nil {
					t.Fatalf("%s v%d: kmsg cannot read its own encoding: %v", kmsg.NameForKey(key), v, derr)
				}
				if int64(got) > cost {
					t.Fatalf("seed %d: %s v%d: ReadFrom allocated %d bytes, the prepass estimated %d", seed, kmsg.NameForKey(key), v, got, cost)
				}
			}
		}
	}
}

// produceManyTopics is the request of the report that found the bound
// missing: a Produce v9 whose body is almost all minimal topic entries
// (3 bytes each: empty compact name, empty compact partitions, no tags).
func produceManyTopics(topics int) []byte {
	b := []byte{0, 0, 0, 9, 0, 0, 0, 1, 0, 0} // key 0, v9, correlation 1, client id null(-1 below)
	b[8], b[9] = 0xff, 0xff
	b = append(b, 0)                   // header tags
	b = append(b, 0)                   // transactional id: null
	b = append(b, 0xff, 0xff)          // acks -1
	b = append(b, 0, 0, 0x75, 0x30)    // timeout
	b = appendUvarintTest(b, topics+1) // topics
	for i := 0; i < topics; i++ {
		b = append(b, 1, 1, 0) // topic "", partitions [], no tags
	}
	return append(b, 0) // request tags
}

func appendUvarintTest(b []byte, n int) []byte {
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}

func TestPrepassRefusesAmplification(t *testing.T) {
	frame := produceManyTopics(1 << 20) // 3 MiB
	if _, _, err := prepassCost(kmsg.NewPtrProduceRequest(), nil); err == nil {
		t.Fatal("an empty body passed")
	}
	var got uint64
	var err error
	got = allocatedBy(func() { _, err = decodeRequest(frame) })
	if !errors.Is(err, ErrMalformed) || !errors.Is(err, errTooManyElements) {
		t.Fatalf("decode of %d bytes declaring 1M topics: err %v", len(frame), err)
	}
	if got > 64<<10 {
		t.Fatalf("refusing allocated %d bytes", got)
	}
	// Fewer elements than the cap, still far more Go memory than bytes.
	frame = produceManyTopics(90_000)
	got = allocatedBy(func() { _, err = decodeRequest(frame) })
	if !errors.Is(err, errTooCostly) {
		t.Fatalf("decode of %d bytes declaring 90000 topics: err %v", len(frame), err)
	}
	if got > 64<<10 {
		t.Fatalf("refusing allocated %d bytes", got)
	}
	// The same shape, small, passes (the slack), and decodes.
	small := produceManyTopics(100)
	if _, err := decodeRequest(small); err != nil {
		t.Fatal(err)
	}
}

// decodeAllocSlackBytes covers what decodeRequest allocates besides the
// body: the request header, the client id, an error's text.
const decodeAllocSlackBytes = 8 << 10

// FuzzDecodeAllocation decodes any frame and fails if it allocated more
// than the bound (decodeLimit of its size plus the header's slack); the
// failure reports the allocated bytes per input byte. Seeds: every served
// API's empty request and the crafted amplifiers, small.
func FuzzDecodeAllocation(f *testing.F) {
	for key, rng := range apis {
		f.Add(frameOf(kmsg.RequestForKey(key), rng.max, 1)[4:])
	}
	for _, a := range amplifiers {
		f.Add(craftFrame(a, 64<<10)[4:]) // large enough that the slack does not cover them
	}
	f.Add(produceManyTopics(3000)[4:])
	f.Fuzz(func(t *testing.T, b []byte) {
		got := allocatedBy(func() { decodeRequest(b) })
		if limit := uint64(decodeLimit(len(b)) + decodeAllocSlackBytes); got > limit {
			t.Fatalf("decoding %d bytes allocated %d (%.1f per input byte), more than the bound %d", len(b), got,
				float64(got)/float64(max(len(b), 1)), limit)
		}
	})
}

// TestCraftedRequestsAllocationPerByte decodes every crafted amplifier at
// 64 KiB and 1 MiB and reports what it allocated per input byte; none may
// pass the bound, and those the walk refuses allocate almost nothing.
func TestCraftedRequestsAllocationPerByte(t *testing.T) {
	for i := 0; i < 2*len(amplifiers); i++ {
		a, size := amplifiers[i/2], []int{64 << 10, 1 << 20}[i%2]
		frame := craftFrame(a, size)[4:]
		var err error
		got := allocatedBy(func() { _, err = decodeRequest(frame) })
		t.Logf("%-38s %8d bytes: %5.2f bytes allocated per byte (refused: %v)", a.name, len(frame), float64(got)/float64(len(frame)), err != nil)
		if got > uint64(decodeLimit(len(frame))+decodeAllocSlackBytes) {
			t.Errorf("%s: %d bytes allocated for %d", a.name, got, len(frame))
		}
		if err != nil && got > decodeAllocSlackBytes {
			t.Errorf("%s: refused, yet %d bytes allocated", a.name, got)
		}
	}
}
