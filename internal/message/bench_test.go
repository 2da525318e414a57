package message_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/keelmq/keel/internal/message"
)

func benchMessage() *message.Message {
	return &message.Message{
		Topic:     "BenchmarkTopic",
		BornHost:  netip.MustParseAddrPort("10.0.0.1:54321"),
		StoreHost: netip.MustParseAddrPort("10.0.0.2:10911"),
		Body:      bytes.Repeat([]byte("x"), 1024),
		Properties: message.EncodeProperties(map[string]string{
			message.PropTags: "TagA", message.PropKeys: "order-1234", message.PropUniqKey: "0A0000010F2A12345678ABCDEF000001",
		}),
	}
}

func BenchmarkAppendStored(b *testing.B) {
	m := benchMessage()
	buf := make([]byte, 0, m.StoredSize())
	b.SetBytes(int64(m.StoredSize()))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = m.AppendStored(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeView(b *testing.B) {
	rec, _ := benchMessage().AppendStored(nil)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	var sink int64
	for b.Loop() {
		if err := message.Check(rec); err != nil {
			b.Fatal(err)
		}
		v := message.View(rec)
		sink += v.QueueOffset() + v.StoreTimestamp() + v.TagsCode() + int64(len(v.Body())+len(v.Topic())+len(v.UniqKey()))
	}
	_ = sink
}

func BenchmarkDecode(b *testing.B) {
	rec, _ := benchMessage().AppendStored(nil)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := message.Decode(rec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUniqIDNext(b *testing.B) {
	g := message.NewUniqIDGenerator(netip.MustParseAddr("10.0.0.1"))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = g.Next()
		}
	})
}
