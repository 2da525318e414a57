package message

import (
	"strings"
	"testing"
)

func TestConvertedIDRoundTrip(t *testing.T) {
	for _, id := range []ConvertedID{{0, 0, ConvertedKafka, 0}, {1 << 40, 7, ConvertedKafka, 0}, {123456, 0, ConvertedAMQP, 0},
		{0, 0, ConvertedKafka, GroupTag("broker-a")}, {1<<48 - 1, 1<<24 - 1, ConvertedKafka, 0xffffff}, {99, 3, ConvertedAMQP, 1}} {
		s := id.String()
		if len(s) != ConvertedIDLen || s != strings.ToUpper(s) {
			t.Fatalf("%+v: %q", id, s)
		}
		for _, in := range []string{s, strings.ToLower(s)} {
			if got, ok := ParseConvertedID(in); !ok || got != id {
				t.Errorf("ParseConvertedID(%q) = %+v %v, want %+v", in, got, ok, id)
			}
		}
	}
	// Not converted ids: a RocketMQ unique key, an offset id, a bad kind,
	// the wrong length.
	for _, s := range []string{"7F00000100002A9F0000000000000000", "0000000000000000000000004B454C58",
		"00000000000000000000004B454C4B", "8000000000000000000000004B454C4B", "0000000000000000000000004B45474B", "zz000000000000000000000004B454C4B"} {
		if id, ok := ParseConvertedID(s); ok {
			t.Errorf("ParseConvertedID(%q) = %+v, want not an id", s, id)
		}
	}
}

// TestConvertedIDGroups: records at one CommitLog offset of two groups
// have different ids; an offset or index too large for the tagged form
// is written without the tag; tags are never 0 and differ for names a
// cluster commonly uses.
func TestConvertedIDGroups(t *testing.T) {
	a := ConvertedID{PhysOffset: 4096, Index: 2, Kind: ConvertedKafka, Group: GroupTag("broker-a")}
	b := a
	b.Group = GroupTag("broker-b")
	if a.String() == b.String() {
		t.Fatalf("broker-a and broker-b give one id %s to the records at one offset", a)
	}
	big := ConvertedID{PhysOffset: 1 << 50, Index: 1, Kind: ConvertedKafka, Group: GroupTag("broker-a")}
	if got, ok := ParseConvertedID(big.String()); !ok || got.PhysOffset != big.PhysOffset || got.Index != 1 || got.Group != 0 {
		t.Fatalf("an offset past 2^48: %+v %v, want it untagged", got, ok)
	}
	seen := map[uint32]string{}
	for _, name := range []string{"broker-a", "broker-b", "broker-c", "broker-d", "broker-e", "broker-f", "broker-g", "broker-h", "", "DefaultCluster"} {
		tag := GroupTag(name)
		if tag == 0 || tag > 0xffffff {
			t.Fatalf("GroupTag(%q) = %#x", name, tag)
		}
		if other, dup := seen[tag]; dup {
			t.Fatalf("GroupTag(%q) = GroupTag(%q)", name, other)
		}
		seen[tag] = name
	}
}
