package message_test

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/keelmq/keel/internal/message"
)

func TestProperty(t *testing.T) {
	cases := []struct {
		props, key, want string
		found            bool
	}{
		{"", "TAGS", "", false},
		{"TAGS\x01a\x02", "TAGS", "a", true},
		{"TAGS\x01a", "TAGS", "a", true},                       // no trailing \x02
		{"KEYS\x01k\x02TAGS\x01a\x02", "TAGS", "a", true},      // not first
		{"TAGS\x01a\x02TAGS\x01b\x02", "TAGS", "b", true},      // last wins
		{"TAGS\x01a\x02TAGS\x01b\x01c\x02", "TAGS", "a", true}, // two \x01: skipped
		{"TAGS\x02", "TAGS", "", false},                        // no \x01: skipped
		{"TAGS\x01\x02", "TAGS", "", true},                     // empty value
		{"TAGSX\x01a\x02", "TAGS", "", false},
		{"TAG\x01a\x02", "TAGS", "", false},
		{"\x02\x02TAGS\x01a\x02\x02", "TAGS", "a", true},
		{"\x01a\x02", "", "a", true},
	}
	for _, c := range cases {
		got, found := message.Property(c.props, c.key)
		gotB, foundB := message.Property([]byte(c.props), c.key)
		if got != c.want || found != c.found || string(gotB) != c.want || foundB != c.found {
			t.Errorf("Property(%q, %q) = %q %v / %q %v, want %q %v",
				c.props, c.key, got, found, gotB, foundB, c.want, c.found)
		}
	}
}

// randProps returns a string made of short names, values and separators in
// random order, so it has well-formed, malformed and duplicate items.
func randProps(r *rand.Rand) string {
	parts := []string{"\x01", "\x02", "A", "B", "TAGS", "v", "ü", "", "\x01\x01"}
	var s string
	for range r.IntN(12) {
		s += parts[r.IntN(len(parts))]
	}
	return s
}

// TestPropertiesMatchClient compares ParseProperties and Property with the Go
// client's UnmarshalProperties on random strings.
func TestPropertiesMatchClient(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 1))
	for range 5000 {
		props := randProps(r)
		var cm primitive.Message
		cm.UnmarshalProperties([]byte(props))
		want := cm.GetProperties()
		got := message.ParseProperties(props)
		if !maps.Equal(got, want) {
			t.Fatalf("seed %d: ParseProperties(%q) = %q, client %q", seed, props, got, want)
		}
		for _, k := range []string{"A", "B", "TAGS", "", "v"} {
			v, ok := message.Property(props, k)
			wv, wok := want[k]
			if v != wv || ok != wok {
				t.Fatalf("seed %d: Property(%q, %q) = %q %v, client %q %v", seed, props, k, v, ok, wv, wok)
			}
		}
	}
}

func TestSetProperty(t *testing.T) {
	cases := []struct{ props, key, value, want string }{
		{"", "K", "v", "K\x01v\x02"},
		{"A\x01a", "K", "v", "A\x01a\x02K\x01v\x02"}, // terminates the last item
		{"K\x01old\x02A\x01a\x02K\x01x\x02", "K", "v", "A\x01a\x02K\x01v\x02"},
		{"junk\x02K\x01a\x01b\x02", "K", "v", "junk\x02K\x01a\x01b\x02K\x01v\x02"}, // malformed kept
		{"A\x01a\x02", "K\x01", "v\x02w", "A\x01a\x02K\x01vw\x02"},                 // separators removed
		{"", "K", "\xff\x01\xfe", "K\x01\xff\xfe\x02"},                             // invalid UTF-8 kept
	}
	for _, c := range cases {
		if got := message.SetProperty(c.props, c.key, c.value); got != c.want {
			t.Errorf("SetProperty(%q, %q, %q) = %q, want %q", c.props, c.key, c.value, got, c.want)
		}
	}
}

func TestDeleteProperty(t *testing.T) {
	cases := []struct{ props, key, want string }{
		{"", "K", ""},
		{"A\x01a", "K", "A\x01a"}, // absent: unchanged
		{"K\x01v\x02A\x01a\x02K\x01w", "K", "A\x01a\x02"},
		{"K\x01a\x01b\x02K\x01v\x02", "K", "K\x01a\x01b\x02"},
	}
	for _, c := range cases {
		if got := message.DeleteProperty(c.props, c.key); got != c.want {
			t.Errorf("DeleteProperty(%q, %q) = %q, want %q", c.props, c.key, got, c.want)
		}
	}
}

func TestEncodeProperties(t *testing.T) {
	m := map[string]string{"b": "2", "a": "1", "c": "", "d\x01": "x\x02y"}
	want := "a\x011\x02b\x012\x02c\x01\x02d\x01xy\x02"
	if got := message.EncodeProperties(m); got != want {
		t.Fatalf("EncodeProperties = %q, want %q", got, want)
	}
	if got := message.EncodeProperties(nil); got != "" {
		t.Fatalf("EncodeProperties(nil) = %q", got)
	}
	m = map[string]string{"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "X"}
	if got := message.ParseProperties(message.EncodeProperties(m)); !maps.Equal(got, m) {
		t.Fatalf("round trip = %q", got)
	}
}

func TestPropertyDoesNotAllocate(t *testing.T) {
	props := []byte(message.EncodeProperties(map[string]string{"TAGS": "a", "KEYS": "k", "UNIQ_KEY": "u"}))
	s := string(props)
	allocs := testing.AllocsPerRun(100, func() {
		if v, ok := message.Property(props, "UNIQ_KEY"); !ok || len(v) != 1 {
			panic("not found")
		}
		if v, ok := message.Property(s, "KEYS"); !ok || v != "k" {
			panic("not found")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run", allocs)
	}
}

// TestSetPropertiesMatchesSetProperty: SetProperties gives the string that
// SetProperty gives pair by pair, for well-formed and malformed inputs,
// repeated keys and keys or values holding separators.
func TestSetPropertiesMatchesSetProperty(t *testing.T) {
	propsCases := []string{
		"", "A\x01a\x02", "A\x01a", "A\x01a\x02B\x01b\x02A\x01again\x02",
		"\x02\x02junk\x02K\x01v\x01w\x02UNIQ_KEY\x01old\x02", "CLUSTER\x01c1\x02TAGS\x01t\x02",
	}
	kvCases := [][]string{
		{}, {"UNIQ_KEY", "ID1"}, {"UNIQ_KEY", "ID1", "CLUSTER", "DefaultCluster"},
		{"A", "1", "A", "2"}, {"A", "1", "B", "2", "A", "3"}, {"K\x01", "v\x02w", "A", ""},
		{"a", "1", "b", "2", "c", "3", "d", "4", "e", "5"}, {"A", "1", "dangling"},
	}
	for _, props := range propsCases {
		for _, kv := range kvCases {
			want := props
			for i := 0; i+1 < len(kv); i += 2 {
				want = message.SetProperty(want, kv[i], kv[i+1])
			}
			if got := message.SetProperties(props, kv...); got != want {
				t.Errorf("SetProperties(%q, %q) = %q, want %q", props, kv, got, want)
			}
		}
	}
}
