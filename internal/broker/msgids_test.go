package broker

import (
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/message"
)

func TestJoinOffsetMsgIDsMatchesOffsetMsgID(t *testing.T) {
	hosts := []netip.AddrPort{
		netip.MustParseAddrPort("10.1.2.3:10911"),
		netip.MustParseAddrPort("[2001:db8::7]:10911"),
		netip.MustParseAddrPort("[::ffff:192.168.0.9]:9876"),
	}
	offsets := []int64{0, 1, 0xABCDEF, 1 << 40, math.MaxInt64}
	for _, h := range hosts {
		for n := 1; n <= len(offsets); n++ {
			var ms []*message.Message
			var ids []string
			for _, off := range offsets[:n] {
				ms = append(ms, &message.Message{PhysOffset: off})
				ids = append(ids, message.OffsetMsgID(h, off))
			}
			if got, want := joinOffsetMsgIDs(h, ms), strings.Join(ids, ","); got != want {
				t.Fatalf("host %v, %d ids:\n got %s\nwant %s", h, n, got, want)
			}
		}
	}
}
