package record

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func systemSamples() []*SystemRecord {
	return []*SystemRecord{
		{Kind: KindOffsets, Offsets: []OffsetEntry{{"g", "t", 0, 12}, {"g2", "%RETRY%g2", 3, -1}}},
		{Kind: KindOffsets, Offsets: []OffsetEntry{}},
		{Kind: KindOffsetsDelete, Group: "g", QueueID: -1},
		{Kind: KindOffsetsDelete, Topic: "t", Group: "g", QueueID: 3},
		{Kind: KindTopicConfig, VersionTimestamp: 1700000000000, VersionCounter: 7,
			Configs: []ConfigEntry{{Name: "t", Config: []byte(`{"topicName":"t"}`)}, {Name: "gone"}}},
		{Kind: KindGroupConfig, VersionCounter: 1, Configs: []ConfigEntry{{Name: "g", Config: []byte(`{}`)}}},
		{Kind: KindDelayProgress, Cursors: []QueueCursor{{"SCHEDULE_TOPIC_XXXX", 2, 40}}},
		{Kind: KindAMQPQueues, Vhost: "/", Configs: []ConfigEntry{{Name: "orders", Config: []byte(`{"name":"orders"}`)}, {Name: "gone"}}},
		{Kind: KindAMQPExchanges, Vhost: "shop", Configs: []ConfigEntry{{Name: "ex", Config: []byte(`{"name":"ex","type":"direct"}`)}}},
		{Kind: KindAMQPAcks, Vhost: "/", Configs: []ConfigEntry{{Name: "%AMQP%00", Config: []byte(`{"floor":3,"delivered":9}`)}}},
		{Kind: KindAMQPAcks, Vhost: "/", Configs: []ConfigEntry{}},
		{Kind: KindKafkaTxn, Payload: []byte(`{"id":"tx"}`)},
	}
}

func TestSystemRecordRoundTrip(t *testing.T) {
	for _, r := range systemSamples() {
		rec, err := AppendSystemRecord(nil, r)
		if err != nil {
			t.Fatalf("%v: %v", r.Kind, err)
		}
		if err := CheckEnvelope(rec); err != nil {
			t.Fatalf("%v: %v", r.Kind, err)
		}
		got, err := DecodeSystem(Envelope(rec).Body())
		if err != nil {
			t.Fatalf("%v: %v", r.Kind, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("%v: decoded %+v, want %+v", r.Kind, got, r)
		}
	}
}

func TestSystemRecordRejects(t *testing.T) {
	good, _ := AppendSystem(nil, systemSamples()[0])
	amqpGood, _ := AppendSystem(nil, &SystemRecord{Kind: KindAMQPQueues, Vhost: "/", Configs: []ConfigEntry{{Name: "q", Config: []byte(`{}`)}}})
	for name, c := range map[string]struct {
		body    []byte
		unknown bool
	}{
		"empty":          {body: nil},
		"version":        {body: append([]byte{2}, good[1:]...), unknown: true},
		"kind":           {body: append([]byte{SystemVersion, 99}, good[2:]...), unknown: true},
		"truncated":      {body: good[:len(good)-1]},
		"trailing bytes": {body: append(append([]byte(nil), good...), 0)},
		"forged count":   {body: []byte{SystemVersion, byte(KindOffsets), 0xff, 0xff, 0xff, 0xff}},
		"AMQP format":    {body: append([]byte{SystemVersion, byte(KindAMQPQueues), AMQPFormat + 1}, amqpGood[3:]...), unknown: true},
		"AMQP truncated": {body: amqpGood[:len(amqpGood)-2]},
		"AMQP no format": {body: []byte{SystemVersion, byte(KindAMQPAcks)}},
	} {
		err := CheckSystem(c.body)
		switch {
		case err == nil:
			t.Errorf("%s: accepted", name)
		case c.unknown && !errors.Is(err, ErrUnknownType):
			t.Errorf("%s: %v does not wrap ErrUnknownType", name, err)
		case !c.unknown && !errors.Is(err, ErrCorrupt):
			t.Errorf("%s: %v does not wrap ErrCorrupt", name, err)
		}
	}
	// A system envelope routed to a queue would be seen by consumers.
	body, _ := AppendSystem(nil, systemSamples()[2])
	rec, _ := AppendEnvelope(nil, System, 0, []Dest{{Topic: "t"}}, body)
	if err := CheckEnvelope(rec); err == nil {
		t.Error("a system record with a destination was accepted")
	}
}

// FuzzDecodeSystem: the decoder never panics, and what it accepts
// encodes back to the same bytes.
func FuzzDecodeSystem(f *testing.F) {
	for _, r := range systemSamples() {
		b, _ := AppendSystem(nil, r)
		f.Add(b)
	}
	f.Add([]byte{SystemVersion, byte(KindTopicConfig), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 'x', 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeSystem(body)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownType) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrUnknownType", err)
			}
			return
		}
		again, err := AppendSystem(nil, r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(again, body) {
			t.Fatalf("re-encoded %x, was %x", again, body)
		}
	})
}
