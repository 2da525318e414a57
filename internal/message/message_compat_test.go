package message_test

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"net/netip"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/keelmq/keel/internal/message"
)

// compatMessages are records in every host-family combination, with
// properties the client reads, a UNIQ_KEY and one without.
func compatMessages() []*message.Message {
	v4a := netip.MustParseAddrPort("10.0.0.1:54321")
	v4b := netip.MustParseAddrPort("192.168.7.9:10911")
	v6a := netip.MustParseAddrPort("[2001:db8::17]:40000")
	v6b := netip.MustParseAddrPort("[fe80::1:2:3:4]:10911")
	base := func(born, store netip.AddrPort) *message.Message {
		return &message.Message{
			Topic:            "TopicTest",
			QueueID:          3,
			Flag:             -7,
			SysFlag:          message.FlagTxCommit | message.FlagMultiTags,
			BornTimestamp:    1_700_000_000_123,
			BornHost:         born,
			StoreHost:        store,
			ReconsumeTimes:   2,
			PreparedTxOffset: 1 << 40,
			Body:             []byte("hello, keel"),
			Properties: message.EncodeProperties(map[string]string{
				message.PropTags:    "TagA",
				message.PropKeys:    "k1 k2",
				message.PropUniqKey: "0A0000010F2A12345678ABCDEF000001",
				"ünïcode":           "välue",
			}),
			QueueOffset:    42,
			PhysOffset:     1 << 33,
			StoreTimestamp: 1_700_000_000_456,
		}
	}
	noProps := base(v4a, v4b)
	noProps.Properties = ""
	noProps.Body = nil
	long := base(v4a, v6b)
	long.Topic = string(bytes.Repeat([]byte("t"), message.MaxTopicBytes))
	long.Body = bytes.Repeat([]byte{0xAB}, 5000)
	return []*message.Message{
		base(v4a, v4b), base(v6a, v4b), base(v4a, v6b), base(v6a, v6b), noProps, long,
	}
}

// TestCompatDecodeMessage encodes records with AppendStored and decodes them
// with the Go client's primitive.DecodeMessage, one by one and concatenated
// (as in a pull response body).
func TestCompatDecodeMessage(t *testing.T) {
	msgs := compatMessages()
	var all []byte
	for i, m := range msgs {
		rec, err := m.AppendStored(nil)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		all = append(all, rec...)
		got := primitive.DecodeMessage(rec)
		if len(got) != 1 {
			t.Fatalf("message %d: client decoded %d messages", i, len(got))
		}
		checkClientMessage(t, fmt.Sprintf("message %d", i), m, rec, got[0])
	}
	got := primitive.DecodeMessage(all)
	if len(got) != len(msgs) {
		t.Fatalf("concatenated: client decoded %d messages, want %d", len(got), len(msgs))
	}
	for i, m := range msgs {
		rec, _ := m.AppendStored(nil)
		checkClientMessage(t, fmt.Sprintf("concatenated %d", i), m, rec, got[i])
	}
}

func checkClientMessage(t *testing.T, name string, m *message.Message, rec []byte, c *primitive.MessageExt) {
	t.Helper()
	wantSys := message.HostSysFlag(m.SysFlag, m.BornHost, m.StoreHost)
	checks := []struct {
		field     string
		got, want any
	}{
		{"StoreSize", c.StoreSize, int32(len(rec))},
		{"BodyCRC", c.BodyCRC, message.View(rec).BodyCRC()},
		{"QueueId", c.Queue.QueueId, int(m.QueueID)},
		{"Flag", c.Flag, m.Flag},
		{"QueueOffset", c.QueueOffset, m.QueueOffset},
		{"CommitLogOffset", c.CommitLogOffset, m.PhysOffset},
		{"SysFlag", c.SysFlag, wantSys},
		{"BornTimestamp", c.BornTimestamp, m.BornTimestamp},
		{"BornHost", c.BornHost, clientHost(m.BornHost)},
		{"StoreTimestamp", c.StoreTimestamp, m.StoreTimestamp},
		{"StoreHost", c.StoreHost, clientHost(m.StoreHost)},
		{"ReconsumeTimes", c.ReconsumeTimes, m.ReconsumeTimes},
		{"PreparedTransactionOffset", c.PreparedTransactionOffset, m.PreparedTxOffset},
		{"Topic", c.Topic, m.Topic},
		{"Body", string(c.Body), string(m.Body)},
		{"OffsetMsgId", c.OffsetMsgId, message.OffsetMsgID(m.StoreHost, m.PhysOffset)},
		{"Properties", fmt.Sprint(c.GetProperties()), fmt.Sprint(message.ParseProperties(m.Properties))},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s: %s = %v, want %v", name, ck.field, ck.got, ck.want)
		}
	}
	wantID := message.OffsetMsgID(m.StoreHost, m.PhysOffset)
	if u, ok := message.Property(m.Properties, message.PropUniqKey); ok {
		wantID = u
	}
	if c.MsgId != wantID {
		t.Errorf("%s: MsgId = %s, want %s", name, c.MsgId, wantID)
	}
}

// clientHost is how the Go client prints a host: net.IP.String() ":" port.
func clientHost(ap netip.AddrPort) string {
	return fmt.Sprintf("%s:%d", ap.Addr().Unmap(), ap.Port())
}

// TestCompatCompressedBody checks that a zlib body is stored as is and that
// the client inflates it when FlagCompressed is set.
func TestCompatCompressedBody(t *testing.T) {
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	plain := bytes.Repeat([]byte("compress me "), 100)
	w.Write(plain)
	w.Close()
	m := compatMessages()[0]
	m.SysFlag |= message.FlagCompressed
	m.Body = z.Bytes()
	rec, err := m.AppendStored(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(message.View(rec).Body(), z.Bytes()) {
		t.Fatal("stored body differs from the compressed bytes")
	}
	got := primitive.DecodeMessage(rec)
	if len(got) != 1 || !bytes.Equal(got[0].Body, plain) {
		t.Fatalf("client did not inflate the body")
	}
}

// TestCompatOffsetMsgID checks OffsetMsgID against the client's
// CreateMessageId and ParseOffsetMsgID against UnmarshalMsgID.
func TestCompatOffsetMsgID(t *testing.T) {
	for _, s := range []string{"10.0.0.1:10911", "[2001:db8::1]:9876", "0.0.0.0:0", "255.255.255.255:65535"} {
		ap := netip.MustParseAddrPort(s)
		for _, off := range []int64{0, 4096, 1<<63 - 1} {
			id := message.OffsetMsgID(ap, off)
			ip := ap.Addr().AsSlice()
			if want := primitive.CreateMessageId(ip, int32(ap.Port()), off); id != want {
				t.Errorf("OffsetMsgID(%s, %d) = %s, client %s", ap, off, id, want)
			}
			cid, err := primitive.UnmarshalMsgID([]byte(id))
			if err == nil && (cid.Port != int(ap.Port()) || cid.Offset != off) {
				t.Errorf("client parsed %s as %+v", id, cid)
			}
			gotAP, gotOff, err := message.ParseOffsetMsgID(id)
			if err != nil || gotAP != ap || gotOff != off {
				t.Errorf("ParseOffsetMsgID(%s) = %s, %d, %v", id, gotAP, gotOff, err)
			}
		}
	}
}

// TestCompatDecodeBatch builds a batch body with the Go producer's
// MarshalMessageBatch and decodes it with DecodeBatch.
func TestCompatDecodeBatch(t *testing.T) {
	var msgs []*primitive.Message
	for i := range 5 {
		m := primitive.NewMessage("TopicTest", []byte(fmt.Sprintf("body %d", i)))
		m.Flag = int32(i * 100)
		if i%2 == 0 {
			m.WithTag(fmt.Sprintf("Tag%d", i))
			m.WithKeys([]string{"a", fmt.Sprint(i)})
		}
		msgs = append(msgs, m)
	}
	msgs[4].Body = nil
	body := producer.MarshalMessageBatch(msgs...)
	i := 0
	err := message.DecodeBatch(body, func(it message.BatchItem) error {
		m := msgs[i]
		if it.Flag != m.Flag || !bytes.Equal(it.Body, m.Body) {
			t.Errorf("item %d: flag %d body %q, want %d %q", i, it.Flag, it.Body, m.Flag, m.Body)
		}
		if got, want := fmt.Sprint(message.ParseProperties(it.Properties)), fmt.Sprint(m.GetProperties()); got != want {
			t.Errorf("item %d: properties %s, want %s", i, got, want)
		}
		i++
		return nil
	})
	if err != nil || i != len(msgs) {
		t.Fatalf("DecodeBatch: %d items, err %v", i, err)
	}
	// Our encoder writes the same bytes as the client (single-property items,
	// so map order cannot differ).
	var items []message.BatchItem
	for _, m := range msgs {
		items = append(items, message.BatchItem{Flag: m.Flag, Body: m.Body, Properties: m.MarshallProperties()})
	}
	ours, err := message.EncodeBatch(items)
	if err != nil {
		t.Fatal(err)
	}
	if err := message.DecodeBatch(ours, func(message.BatchItem) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if len(ours) != len(body) {
		t.Fatalf("EncodeBatch made %d bytes, client %d", len(ours), len(body))
	}
}
