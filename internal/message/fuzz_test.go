package message_test

import (
	"bytes"
	"encoding/binary"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/keelmq/keel/internal/message"
)

// seedRecords are real encoded records for the fuzz seed corpora.
func seedRecords(f *testing.F) [][]byte {
	var recs [][]byte
	for _, m := range compatMessages() {
		rec, err := m.AppendStored(nil)
		if err != nil {
			f.Fatal(err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// FuzzDecode: Check never panics; an accepted record decodes, its View agrees
// with Decode, the Go client reads the same fields, and re-encoding gives the
// same bytes (up to BODYCRC and host forms the encoder normalises).
func FuzzDecode(f *testing.F) {
	for _, rec := range seedRecords(f) {
		f.Add(rec)
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		d, err := message.Decode(rec)
		if (err == nil) != (message.Check(rec) == nil) {
			t.Fatalf("Decode and Check disagree: %v", err)
		}
		if err != nil {
			return
		}
		v := message.View(rec)
		checkView(t, v, *d)
		_ = v.CheckBodyCRC()
		_ = v.TagsCode()
		again, err := d.AppendStored(nil)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		want := bytes.Clone(rec)
		binary.BigEndian.PutUint32(want[8:], uint32(message.View(again).BodyCRC()))
		mapped := d.BornHost.Addr().Is4In6() || d.StoreHost.Addr().Is4In6()
		if !mapped && !bytes.Equal(again, want) {
			t.Fatalf("re-encoded\n%x\nwant\n%x", again, want)
		}
		if d.SysFlag&message.FlagCompressed == 0 {
			checkClientDecode(t, rec, d)
		}
	})
}

func checkClientDecode(t *testing.T, rec []byte, d *message.Message) {
	c := primitive.DecodeMessage(rec)
	if len(c) != 1 {
		t.Fatalf("client decoded %d messages", len(c))
	}
	if c[0].Topic != d.Topic || !bytes.Equal(c[0].Body, d.Body) || c[0].QueueOffset != d.QueueOffset ||
		c[0].StoreTimestamp != d.StoreTimestamp || c[0].StoreHost != clientHost(d.StoreHost) ||
		!maps.Equal(c[0].GetProperties(), message.ParseProperties(d.Properties)) {
		t.Fatalf("client read %v, we read %+v", c[0], d)
	}
}

// FuzzDecodeBatch: DecodeBatch never panics; an accepted body re-encodes to
// the same bytes once MAGICCODE and BODYCRC (ignored on input) are zeroed.
func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte{})
	for _, rec := range seedRecords(f) {
		f.Add(rec) // a stored record is not a batch
		d, _ := message.Decode(rec)
		b, err := message.EncodeBatch([]message.BatchItem{
			{Flag: d.Flag, Body: d.Body, Properties: d.Properties},
			{Flag: 1, Body: []byte("second")},
		})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var items []message.BatchItem
		err := message.DecodeBatch(body, func(it message.BatchItem) error {
			items = append(items, it)
			return nil
		})
		if err != nil {
			if len(items) != 0 {
				t.Fatalf("%d items delivered before error %v", len(items), err)
			}
			return
		}
		again, err := message.EncodeBatch(items)
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Clone(body)
		for off := 0; off < len(want); off += int(binary.BigEndian.Uint32(want[off:])) {
			clear(want[off+4 : off+12])
		}
		if !bytes.Equal(again, want) {
			t.Fatalf("re-encoded\n%x\nwant\n%x", again, want)
		}
	})
}

// FuzzProperties compares the properties functions with each other and with
// the Go client's parser.
func FuzzProperties(f *testing.F) {
	f.Add("", "TAGS", "v")
	f.Add("TAGS\x01TagA\x02KEYS\x01k1 k2\x02", "TAGS", "x")
	f.Add("TAGS\x01a\x01b\x02TAGS\x01c", "TAGS", "\x02")
	f.Add("\x02\x02\x01\x01", "", "")
	for _, rec := range seedRecords(f) {
		f.Add(string(message.View(rec).Properties()), "UNIQ_KEY", "id")
	}
	f.Fuzz(func(t *testing.T, props, key, value string) {
		var cm primitive.Message
		cm.UnmarshalProperties([]byte(props))
		parsed := message.ParseProperties(props)
		if !maps.Equal(parsed, cm.GetProperties()) {
			t.Fatalf("ParseProperties %q, client %q", parsed, cm.GetProperties())
		}
		got, ok := message.Property(props, key)
		if want, wok := parsed[key]; got != want || ok != wok {
			t.Fatalf("Property(%q) = %q %v, parsed %q %v", key, got, ok, want, wok)
		}
		set := message.SetProperty(props, key, value)
		afterSet := message.ParseProperties(set)
		cleanKey, cleanValue := clean(key), clean(value)
		if afterSet[cleanKey] != cleanValue {
			t.Fatalf("after SetProperty(%q, %q): %q", key, value, afterSet)
		}
		del := message.DeleteProperty(set, cleanKey)
		afterDel := message.ParseProperties(del)
		if _, ok := afterDel[cleanKey]; ok {
			t.Fatalf("after DeleteProperty(%q): %q", cleanKey, afterDel)
		}
		delete(parsed, cleanKey)
		delete(afterSet, cleanKey)
		if !maps.Equal(parsed, afterSet) || !maps.Equal(parsed, afterDel) {
			t.Fatalf("other items changed: %q / %q / %q", parsed, afterSet, afterDel)
		}
		if !maps.Equal(message.ParseProperties(message.EncodeProperties(parsed)), parsed) {
			t.Fatalf("EncodeProperties round trip of %q", parsed)
		}
	})
}

// clean drops the bytes 1 and 2 from s.
func clean(s string) string {
	return strings.NewReplacer("\x01", "", "\x02", "").Replace(s)
}

// FuzzOffsetMsgID: ParseOffsetMsgID never panics and accepted ids format back
// to themselves (uppercase; mapped IPv6 ids shrink to the IPv4 form).
func FuzzOffsetMsgID(f *testing.F) {
	f.Add("0A00000100002A9F0000000000001000")
	f.Add(message.OffsetMsgID(netip.MustParseAddrPort("[2001:db8::1]:1"), 1))
	f.Fuzz(func(t *testing.T, id string) {
		ap, off, err := message.ParseOffsetMsgID(id)
		if err != nil {
			return
		}
		again := message.OffsetMsgID(ap, off)
		if len(again) == len(id) && !bytes.EqualFold([]byte(again), []byte(id)) {
			t.Fatalf("%s -> %s %d -> %s", id, ap, off, again)
		}
	})
}
