package message_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/message"
)

// randAddrPort returns a random IPv4, IPv6, IPv4-mapped or zero address.
func randAddrPort(r *rand.Rand) netip.AddrPort {
	var a [16]byte
	for i := range a {
		a[i] = byte(r.Uint32())
	}
	port := uint16(r.Uint32())
	switch r.IntN(4) {
	case 0:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[:4])), port)
	case 1:
		return netip.AddrPortFrom(netip.AddrFrom16(a), port)
	case 2:
		return netip.AddrPortFrom(netip.AddrFrom16(netip.AddrFrom4([4]byte(a[:4])).As16()), port)
	default:
		return netip.AddrPort{}
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func randMessage(r *rand.Rand) *message.Message {
	props := map[string]string{}
	for range r.IntN(5) {
		props[string(randBytes(r, 1+r.IntN(8)))] = string(randBytes(r, r.IntN(20)))
	}
	return &message.Message{
		Topic:            string(randBytes(r, r.IntN(message.MaxTopicBytes+1))),
		QueueID:          int32(r.Uint32()),
		Flag:             int32(r.Uint32()),
		SysFlag:          int32(r.Uint32()),
		BornTimestamp:    int64(r.Uint64()),
		BornHost:         randAddrPort(r),
		StoreHost:        randAddrPort(r),
		ReconsumeTimes:   int32(r.Uint32()),
		PreparedTxOffset: int64(r.Uint64()),
		Body:             randBytes(r, r.IntN(300)),
		Properties:       message.EncodeProperties(props),
		QueueOffset:      int64(r.Uint64()),
		PhysOffset:       int64(r.Uint64()),
		StoreTimestamp:   int64(r.Uint64()),
	}
}

// canonical is m as Decode returns it after AppendStored: hosts unmapped
// (zero addresses become 0.0.0.0) and the V6 sysflag bits set.
func canonical(m *message.Message) message.Message {
	c := *m
	c.SysFlag = message.HostSysFlag(m.SysFlag, m.BornHost, m.StoreHost)
	c.BornHost, c.StoreHost = canonicalHost(m.BornHost), canonicalHost(m.StoreHost)
	return c
}

func canonicalHost(ap netip.AddrPort) netip.AddrPort {
	if !ap.Addr().IsValid() {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), ap.Port())
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

func equalMessage(t *testing.T, got, want message.Message) {
	t.Helper()
	if !reflect.DeepEqual(withoutBody(got), withoutBody(want)) || !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("decoded %+v\nwant    %+v", got, want)
	}
}

func withoutBody(m message.Message) message.Message {
	m.Body = nil
	return m
}

func TestRoundTripRandom(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	buf := []byte("prefix")
	for range 2000 {
		m := randMessage(r)
		start := len(buf)
		var err error
		buf, err = m.AppendStored(buf)
		if err != nil {
			t.Fatal(err)
		}
		rec := buf[start:]
		if len(rec) != m.StoredSize() {
			t.Fatalf("wrote %d bytes, StoredSize %d", len(rec), m.StoredSize())
		}
		if err := message.Check(rec); err != nil {
			t.Fatalf("Check: %v", err)
		}
		d, err := message.Decode(rec)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		want := canonical(m)
		equalMessage(t, *d, want)
		checkView(t, message.View(rec), want)
		if err := message.View(rec).CheckBodyCRC(); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.HasPrefix(buf, []byte("prefix")) {
		t.Fatal("AppendStored overwrote the destination's contents")
	}
}

func checkView(t *testing.T, v message.View, m message.Message) {
	t.Helper()
	got := message.Message{
		Topic: string(v.Topic()), QueueID: v.QueueID(), Flag: v.Flag(), SysFlag: v.SysFlag(),
		BornTimestamp: v.BornTimestamp(), BornHost: v.BornHost(), StoreHost: v.StoreHost(),
		ReconsumeTimes: v.ReconsumeTimes(), PreparedTxOffset: v.PreparedTxOffset(), Body: v.Body(),
		Properties: string(v.Properties()), QueueOffset: v.QueueOffset(), PhysOffset: v.PhysOffset(),
		StoreTimestamp: v.StoreTimestamp(),
	}
	equalMessage(t, got, m)
	if int(v.TotalSize()) != len(v) || v.MagicCode() != message.MagicV1 {
		t.Fatalf("TotalSize %d (len %d), magic %#x", v.TotalSize(), len(v), v.MagicCode())
	}
}

// TestLayoutIPv4 pins the byte offsets of the design document for IPv4 hosts.
func TestLayoutIPv4(t *testing.T) {
	m := &message.Message{
		Topic: "T1", Body: []byte("body"), Properties: "a\x01b\x02",
		BornHost:  netip.MustParseAddrPort("1.2.3.4:5"),
		StoreHost: netip.MustParseAddrPort("6.7.8.9:10911"),
		QueueID:   7, QueueOffset: 8, PhysOffset: 9, StoreTimestamp: 11, BornTimestamp: 10,
	}
	rec, err := m.AppendStored(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := 91 + 4 + 2 + 4; len(rec) != want {
		t.Fatalf("TOTALSIZE %d, want %d", len(rec), want)
	}
	be := binary.BigEndian
	pins := []struct {
		off  int
		want uint64
		size int
	}{
		{0, uint64(len(rec)), 4}, {4, 0xDAA320A7, 4}, {12, 7, 4}, {20, 8, 8}, {28, 9, 8},
		{36, 0, 4}, {40, 10, 8}, {48, 0x01020304, 4}, {52, 5, 4}, {56, 11, 8},
		{64, 0x06070809, 4}, {68, 10911, 4}, {84, 4, 4}, {92, 2, 1}, {95, 4, 2},
	}
	for _, p := range pins {
		var got uint64
		switch p.size {
		case 1:
			got = uint64(rec[p.off])
		case 2:
			got = uint64(be.Uint16(rec[p.off:]))
		case 4:
			got = uint64(be.Uint32(rec[p.off:]))
		case 8:
			got = be.Uint64(rec[p.off:])
		}
		if got != p.want {
			t.Errorf("offset %d: %#x, want %#x", p.off, got, p.want)
		}
	}
	if string(rec[88:92]) != "body" || string(rec[93:95]) != "T1" || string(rec[97:]) != "a\x01b\x02" {
		t.Errorf("variable part %q", rec[88:])
	}
}

func TestLayoutIPv6(t *testing.T) {
	m := &message.Message{
		Topic: "T", Body: []byte("b"), Properties: "p",
		BornHost:  netip.MustParseAddrPort("[2001:db8::1]:1"),
		StoreHost: netip.MustParseAddrPort("[2001:db8::2]:2"),
		SysFlag:   message.FlagCompressed,
	}
	rec, _ := m.AppendStored(nil)
	if want := 115 + 1 + 1 + 1; len(rec) != want {
		t.Fatalf("TOTALSIZE %d, want %d", len(rec), want)
	}
	v := message.View(rec)
	if want := message.FlagCompressed | message.FlagBornHostV6 | message.FlagStoreHostV6; v.SysFlag() != want {
		t.Fatalf("SysFlag %#x, want %#x", v.SysFlag(), want)
	}
	if v.BornHost() != m.BornHost || v.StoreHost() != m.StoreHost {
		t.Fatalf("hosts %s %s", v.BornHost(), v.StoreHost())
	}
	// A V6 bit set by the caller without an IPv6 host is cleared.
	m.BornHost = netip.MustParseAddrPort("[::ffff:1.2.3.4]:1")
	rec, _ = m.AppendStored(nil)
	if v := message.View(rec); v.SysFlag()&message.FlagBornHostV6 != 0 || v.BornHost().String() != "1.2.3.4:1" {
		t.Fatalf("mapped host stored as %s, sysflag %#x", v.BornHost(), v.SysFlag())
	}
}

func TestAppendStoredLimits(t *testing.T) {
	ok := &message.Message{Topic: strings.Repeat("t", 127), Properties: strings.Repeat("p", 32767)}
	if _, err := ok.AppendStored(nil); err != nil {
		t.Fatalf("at the limits: %v", err)
	}
	for _, m := range []*message.Message{
		{Topic: strings.Repeat("t", 128)},
		{Topic: "t", Properties: strings.Repeat("p", 32768)},
	} {
		dst := []byte("keep")
		out, err := m.AppendStored(dst)
		if !errors.Is(err, message.ErrTooLarge) || string(out) != "keep" {
			t.Errorf("AppendStored = %q, %v; want unchanged dst and ErrTooLarge", out, err)
		}
	}
}

func TestPatchStored(t *testing.T) {
	for _, born := range []string{"1.2.3.4:5", "[2001:db8::9]:5"} {
		m := &message.Message{Topic: "T", Body: []byte("x"), BornHost: netip.MustParseAddrPort(born)}
		rec, _ := m.AppendStored(nil)
		before := bytes.Clone(rec)
		message.PatchStored(rec, 100, 200, 300)
		v := message.View(rec)
		if v.QueueOffset() != 100 || v.PhysOffset() != 200 || v.StoreTimestamp() != 300 {
			t.Fatalf("%s: patched %d %d %d", born, v.QueueOffset(), v.PhysOffset(), v.StoreTimestamp())
		}
		m.QueueOffset, m.PhysOffset, m.StoreTimestamp = 100, 200, 300
		want, _ := m.AppendStored(nil)
		if !bytes.Equal(rec, want) {
			t.Fatalf("%s: patched record differs from a fresh encoding\nbefore %x\nafter  %x\nwant   %x", born, before, rec, want)
		}
	}
}

func validRecord(t testing.TB) []byte {
	m := &message.Message{
		Topic: "TopicA", Body: []byte("payload"), Properties: "TAGS\x01x\x02",
		BornHost: netip.MustParseAddrPort("10.0.0.1:1"), StoreHost: netip.MustParseAddrPort("10.0.0.2:2"),
	}
	rec, err := m.AppendStored(nil)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestCheckRejects(t *testing.T) {
	be := binary.BigEndian
	rec := validRecord(t) // body 7 bytes at 88, TOPICLEN at 95, PROPLEN at 102
	cases := []struct {
		name  string
		edit  func([]byte) []byte
		field string
	}{
		{"empty", func(b []byte) []byte { return nil }, "minimum"},
		{"short", func(b []byte) []byte { return b[:90] }, "minimum"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, "TOTALSIZE"},
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }, "TOTALSIZE"},
		{"blank magic", func(b []byte) []byte { be.PutUint32(b[4:], 0xCBD43194); return b }, "MAGICCODE"},
		{"magic V2", func(b []byte) []byte { be.PutUint32(b[4:], 0xDAA320AB); return b }, "MAGICCODE"},
		{"negative body", func(b []byte) []byte { be.PutUint32(b[84:], 0xFFFFFFFF); return b }, "BODYLEN"},
		{"huge body", func(b []byte) []byte { be.PutUint32(b[84:], 1<<31-1); return b }, "BODYLEN"},
		{"body too long", func(b []byte) []byte { be.PutUint32(b[84:], 8); return b }, "TOPICLEN"},
		{"negative topic", func(b []byte) []byte { b[95] = 0x80; return b }, "TOPICLEN"},
		{"topic too long", func(b []byte) []byte { b[95] = 120; return b }, "TOPICLEN"},
		{"negative props", func(b []byte) []byte { be.PutUint16(b[102:], 0x8000); return b }, "PROPLEN"},
		{"props short", func(b []byte) []byte { be.PutUint16(b[102:], 6); return b }, "PROPLEN"},
		{"born V6 bit", func(b []byte) []byte { b[39] |= 0x10; return b }, "BORNHOST"},
		{"both V6 bits", func(b []byte) []byte { b[39] |= 0x30; return b }, "sysflag"},
		{"born port", func(b []byte) []byte { be.PutUint32(b[52:], 65536); return b }, "BORNHOST"},
		{"store port", func(b []byte) []byte { be.PutUint32(b[68:], 0xFFFFFFFF); return b }, "STOREHOST"},
	}
	for _, c := range cases {
		b := c.edit(bytes.Clone(rec))
		err := message.Check(b)
		if !errors.Is(err, message.ErrCorrupt) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: Check = %v; want ErrCorrupt naming %s", c.name, err, c.field)
		}
		if _, derr := message.Decode(b); !errors.Is(derr, message.ErrCorrupt) {
			t.Errorf("%s: Decode = %v", c.name, derr)
		}
	}
}

// TestCheckEveryPrefixAndByte truncates a record at every length and sets
// every byte to several values: Check must never panic, must reject every
// prefix, and whatever it accepts must be readable through View and Decode.
func TestCheckEveryPrefixAndByte(t *testing.T) {
	rec := validRecord(t)
	for n := range len(rec) {
		if message.Check(rec[:n]) == nil {
			t.Fatalf("accepted a %d-byte prefix of a %d-byte record", n, len(rec))
		}
	}
	for i := range rec {
		for _, x := range []byte{0, 1, 0x7F, 0x80, 0xFF, rec[i] ^ 0x10} {
			b := bytes.Clone(rec)
			b[i] = x
			if message.Check(b) != nil {
				continue
			}
			d, err := message.Decode(b)
			if err != nil {
				t.Fatalf("byte %d = %#x: Check passed, Decode: %v", i, x, err)
			}
			checkView(t, message.View(b), *d)
		}
	}
}

func TestCheckBodyCRC(t *testing.T) {
	rec := validRecord(t)
	rec[88] ^= 1
	if err := message.Check(rec); err != nil {
		t.Fatalf("Check looks at BODYCRC: %v", err)
	}
	if err := message.View(rec).CheckBodyCRC(); !errors.Is(err, message.ErrCorrupt) {
		t.Fatalf("CheckBodyCRC = %v", err)
	}
}

func TestDecodeBodyAliases(t *testing.T) {
	rec := validRecord(t)
	d, _ := message.Decode(rec)
	if &d.Body[0] != &rec[88] {
		t.Fatal("Body does not alias the record")
	}
	d.Body = append(d.Body, 'X')
	if err := message.Check(rec); err != nil {
		t.Fatalf("append to Body wrote into the record: %v", err)
	}
}

func TestViewAndAppendDoNotAllocate(t *testing.T) {
	rec := validRecord(t)
	v := message.View(rec)
	m, _ := message.Decode(bytes.Clone(rec))
	buf := make([]byte, 0, 4096)
	var sink int64
	allocs := testing.AllocsPerRun(100, func() {
		sink += int64(len(v.Body())+len(v.Topic())+len(v.Properties())+len(v.Tags())+len(v.Keys())) +
			v.QueueOffset() + v.PhysOffset() + v.StoreTimestamp() + v.BornTimestamp() + v.TagsCode() +
			int64(v.StoreHost().Port()+v.BornHost().Port()) + int64(v.SysFlag()+v.QueueID()+v.ReconsumeTimes())
		if message.Check(rec) != nil {
			panic("check")
		}
		buf, _ = m.AppendStored(buf[:0])
		message.PatchStored(buf, 1, 2, 3)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run", allocs)
	}
	_ = sink
}
