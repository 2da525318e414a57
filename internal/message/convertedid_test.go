package message

import (
	"strings"
	"testing"
)

func TestConvertedIDRoundTrip(t *testing.T) {
	for _, id := range []ConvertedID{{0, 0, ConvertedKafka}, {1 << 40, 7, ConvertedKafka}, {123456, 0, ConvertedAMQP}} {
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
	// a negative offset, the wrong length.
	for _, s := range []string{"7F00000100002A9F0000000000000000", "0000000000000000000000004B454C58",
		"8000000000000000000000004B454C4B", "00000000000000000000004B454C4B", "zz000000000000000000000004B454C4B"} {
		if id, ok := ParseConvertedID(s); ok {
			t.Errorf("ParseConvertedID(%q) = %+v, want not an id", s, id)
		}
	}
}
