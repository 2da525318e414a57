package record

import (
	"errors"
	"testing"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	dests := []Dest{{Topic: "a", QueueID: 1, TagsCode: 7}, {Topic: "bb", QueueID: 2, QueueOffset: 9, TagsCode: -3}}
	rec, err := AppendEnvelope(nil, AMQP, 3, dests, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckEnvelope(rec); err != nil {
		t.Fatal(err)
	}
	if typ, err := TypeOf(rec); err != nil || typ != AMQP {
		t.Fatalf("type %v %v", typ, err)
	}
	e := Envelope(rec)
	e.Patch(4096, 1234)
	var got []Dest
	e.EachDest(func(i int, topic []byte, qid int32, qo, code int64, at int) error {
		e.PatchQueueOffset(at, int64(100+i))
		return nil
	})
	e.EachDest(func(i int, topic []byte, qid int32, qo, code int64, at int) error {
		got = append(got, Dest{string(topic), qid, qo, code})
		return nil
	})
	want := []Dest{{"a", 1, 100, 7}, {"bb", 2, 101, -3}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("dests %+v", got)
	}
	if e.PhysOffset() != 4096 || e.StoreTimestamp() != 1234 || e.Messages() != 3 || string(e.Body()) != "payload" || e.Type() != AMQP {
		t.Fatalf("fields: phys %d ts %d messages %d body %q", e.PhysOffset(), e.StoreTimestamp(), e.Messages(), e.Body())
	}
	if err := CheckEnvelope(rec); err != nil {
		t.Fatal(err)
	}
}

func TestCheckEnvelopeRejects(t *testing.T) {
	good, _ := AppendEnvelope(nil, KafkaBatch, 5, []Dest{{Topic: "t", QueueID: 0}}, []byte("batch"))
	cases := map[string]func([]byte) []byte{
		"short":         func(b []byte) []byte { return b[:20] },
		"totalsize":     func(b []byte) []byte { b[3]++; return b },
		"rocketmq":      func(b []byte) []byte { copy(b[4:], []byte{0xDA, 0xA3, 0x20, 0xA7}); return b },
		"flags":         func(b []byte) []byte { b[offFlags+1] = 2; return b }, // bit 0 is FlagEntryPerMessage
		"destcount":     func(b []byte) []byte { b[offDestCount+1] = 2; return b },
		"topiclen zero": func(b []byte) []byte { b[HeaderBytes] = 0; return b },
		"bodylen":       func(b []byte) []byte { b[offBodyLen+3]++; return b },
	}
	for name, mutate := range cases {
		b := mutate(append([]byte(nil), good...))
		if err := CheckEnvelope(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	unknown := append([]byte(nil), good...)
	copy(unknown[4:], []byte{0xDA, 0xA3, 0x99, 0x99})
	if err := CheckEnvelope(unknown); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown magic: %v", err)
	}
	if _, err := TypeOf(unknown); !errors.Is(err, ErrUnknownType) {
		t.Errorf("TypeOf unknown magic: %v", err)
	}
	if _, err := AppendEnvelope(nil, RocketMQ, 1, nil, nil); err == nil {
		t.Error("enveloped a RocketMQ record")
	}
}

func FuzzCheckEnvelope(f *testing.F) {
	good, _ := AppendEnvelope(nil, System, 0, []Dest{{Topic: "x", QueueID: 3}}, []byte{1, 2})
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if CheckEnvelope(b) != nil {
			return
		}
		e := Envelope(b)
		n := 0
		e.EachDest(func(int, []byte, int32, int64, int64, int) error { n++; return nil })
		if n != e.DestCount() || len(e.Body()) > len(b) {
			t.Fatalf("accepted an envelope its accessors disagree with")
		}
	})
}

// TestEntryPerMessageFlag: FlagEntryPerMessage gives a destination one
// entry per message; a record without it one; an unknown FLAGS bit, or the
// flag with no message, is refused on write and on read.
func TestEntryPerMessageFlag(t *testing.T) {
	dests := []Dest{{Topic: "k", QueueID: 0}}
	rec, err := AppendEnvelopeFlags(nil, KafkaBatch, FlagEntryPerMessage, 6, dests, []byte("batch"))
	if err != nil || CheckEnvelope(rec) != nil {
		t.Fatal(err, CheckEnvelope(rec))
	}
	if e := Envelope(rec); e.Entries() != 6 || e.Flags() != FlagEntryPerMessage {
		t.Fatalf("entries %d flags %#x", e.Entries(), e.Flags())
	}
	old, _ := AppendEnvelope(nil, KafkaBatch, 6, dests, []byte("batch"))
	if Envelope(old).Entries() != 1 {
		t.Fatalf("an unflagged record has %d entries", Envelope(old).Entries())
	}
	if _, err := AppendEnvelopeFlags(nil, KafkaBatch, FlagEntryPerMessage, 0, dests, nil); err == nil {
		t.Fatal("flag with no message accepted")
	}
	if _, err := AppendEnvelopeFlags(nil, KafkaBatch, 2, 1, dests, nil); err == nil {
		t.Fatal("unknown flag accepted")
	}
	rec[13] |= 2
	if err := CheckEnvelope(rec); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unknown flag read: %v", err)
	}
	rec[13] = byte(FlagEntryPerMessage)
	rec[8], rec[9], rec[10], rec[11] = 0, 0, 0, 0
	if err := CheckEnvelope(rec); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flag with no message read: %v", err)
	}
}
