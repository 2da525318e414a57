package message_test

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/keelmq/keel/internal/message"
)

func TestOffsetMsgID(t *testing.T) {
	cases := []struct {
		host string
		off  int64
		want string
	}{
		{"10.0.0.1:10911", 4096, "0A00000100002A9F0000000000001000"}, // design doc example
		{"[::ffff:10.0.0.1]:10911", 4096, "0A00000100002A9F0000000000001000"},
		{"[2001:db8::1]:1", 255, "20010DB8000000000000000000000001" + "00000001" + "00000000000000FF"},
	}
	for _, c := range cases {
		ap := netip.MustParseAddrPort(c.host)
		if got := message.OffsetMsgID(ap, c.off); got != c.want {
			t.Errorf("OffsetMsgID(%s, %d) = %s, want %s", c.host, c.off, got, c.want)
		}
		gotAP, gotOff, err := message.ParseOffsetMsgID(strings.ToLower(c.want))
		if err != nil || gotAP != netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()) || gotOff != c.off {
			t.Errorf("ParseOffsetMsgID(%s) = %s %d %v", c.want, gotAP, gotOff, err)
		}
	}
}

func TestParseOffsetMsgIDRejects(t *testing.T) {
	for _, id := range []string{
		"",
		"0A00000100002A9F000000000000100",   // 31
		"0A00000100002A9F00000000000010000", // 33
		"0A00000100002A9F000000000000100G",  // not hex
		"0A00000100012A9F0000000000001000",  // port 76447
		"0A000001FFFFFFFF0000000000001000",  // port -1
		"0A00000100002A9F8000000000001000",  // negative offset
	} {
		if _, _, err := message.ParseOffsetMsgID(id); !errors.Is(err, message.ErrBadMsgID) {
			t.Errorf("ParseOffsetMsgID(%q) = %v, want ErrBadMsgID", id, err)
		}
	}
}

// uniqIDFields splits an IPv4 UNIQ_KEY into its layout fields.
func uniqIDFields(t *testing.T, id string) (ip [4]byte, pid uint16, random uint32, ms uint32, counter uint16) {
	t.Helper()
	if len(id) != 32 || strings.ToUpper(id) != id {
		t.Fatalf("id %q: want 32 uppercase hex characters", id)
	}
	b, err := hex.DecodeString(id)
	if err != nil {
		t.Fatal(err)
	}
	copy(ip[:], b)
	pid = uint16(b[4])<<8 | uint16(b[5])
	random = uint32(b[6])<<24 | uint32(b[7])<<16 | uint32(b[8])<<8 | uint32(b[9])
	ms = uint32(b[10])<<24 | uint32(b[11])<<16 | uint32(b[12])<<8 | uint32(b[13])
	counter = uint16(b[14])<<8 | uint16(b[15])
	return
}

func TestUniqIDLayout(t *testing.T) {
	g := message.NewUniqIDGenerator(netip.MustParseAddr("192.168.1.2"))
	a, b := g.Next(), g.Next()
	ipA, pidA, rndA, msA, cA := uniqIDFields(t, a)
	ipB, pidB, rndB, msB, cB := uniqIDFields(t, b)
	if ipA != [4]byte{192, 168, 1, 2} || ipB != ipA {
		t.Errorf("ip %v %v", ipA, ipB)
	}
	if pidA != uint16(os.Getpid()) || pidB != pidA || rndB != rndA {
		t.Errorf("pid %d %d (want %d), random %x %x", pidA, pidB, uint16(os.Getpid()), rndA, rndB)
	}
	if msB < msA || msA > 31*24*3600*1000 {
		t.Errorf("ms since month start %d then %d", msA, msB)
	}
	if cB != cA+1 {
		t.Errorf("counter %d then %d", cA, cB)
	}
	v6 := message.NewUniqIDGenerator(netip.MustParseAddr("2001:db8::5")).Next()
	if len(v6) != 56 || !strings.HasPrefix(v6, "20010DB8000000000000000000000005") {
		t.Errorf("IPv6 id %q", v6)
	}
	if id := message.NewUniqIDGenerator(netip.Addr{}).Next(); len(id) != 32 {
		t.Errorf("id without an ip %q", id)
	}
}

// TestUniqIDConcurrent draws ids from several goroutines: all distinct.
func TestUniqIDConcurrent(t *testing.T) {
	g := message.NewUniqIDGenerator(netip.MustParseAddr("10.1.2.3"))
	const workers, each = 4, 5000 // fewer than 65536: the counter cannot wrap
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				ids[w] = append(ids[w], g.Next())
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool, workers*each)
	for _, list := range ids {
		for _, id := range list {
			if seen[id] {
				t.Fatalf("duplicate id %s", id)
			}
			seen[id] = true
		}
	}
}
