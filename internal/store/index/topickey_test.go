package index

import (
	"slices"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// The hash of a (topic, key) pair is the one stored for "topic#key": files
// written before PutTopicKey existed, and Query, find the same entries.
func TestTopicKeyHashIsKeyHashOfTheJoinedKey(t *testing.T) {
	if got := KeyHash("TopicA#key-1"); got != 551480017 { // FNV-1a, computed apart
		t.Fatalf("KeyHash(TopicA#key-1) = %d, want 551480017", got)
	}
	long := string(make([]byte, 300))
	for _, c := range [][2]string{{"TopicA", "key-1"}, {"", "k"}, {"t", ""}, {"%RETRY%g", "\xff\x00#"}, {long, long + "x"}} {
		if got, want := TopicKeyHash([]byte(c[0]), []byte(c[1])), KeyHash(c[0]+"#"+c[1]); got != want {
			t.Errorf("TopicKeyHash(%q, %q) = %d, KeyHash of the joined key %d", c[0], c[1], got, want)
		}
	}
}

// PutTopicKey's entries are found by Query under "topic#key", and a put
// allocates nothing (the dispatcher makes one or two per record).
func TestPutTopicKeyQueriesAndDoesNotAllocate(t *testing.T) {
	ix := openIndex(t, vfs.NewMem(), 64, 100000)
	defer ix.Close()
	topic, key := []byte("TopicA"), []byte("0A0B0C0D0E0F101112131415161718191A1B1C1D")
	for i := range int64(3) {
		if err := ix.PutTopicKey(topic, key, 100*i, baseTs); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ix.Query(string(topic)+"#"+string(key), 10, baseTs, baseTs)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{200, 100, 0}; !slices.Equal(got, want) {
		t.Fatalf("Query = %v, want %v", got, want)
	}
	if err := ix.PutTopicKey(topic, nil, 0, baseTs); err == nil {
		t.Fatal("an empty key was put")
	}
	phys := int64(1000)
	allocs := testing.AllocsPerRun(1000, func() {
		phys += 100
		if err := ix.PutTopicKey(topic, key, phys, baseTs); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("PutTopicKey: %.2f allocations a put, want 0", allocs)
	}
}
