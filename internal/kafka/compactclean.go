package kafka

// Cleaning one record batch: its records are judged one by one (the
// latest record of each key stays, a tombstone until its horizon), and a
// batch that loses some is rewritten: the same header (baseOffset,
// lastOffsetDelta, timestamps, producer fields, codec), the surviving
// records' bytes unchanged (their offset and timestamp deltas too),
// recordsCount, batchLength and the CRC-32C recomputed, compressed again
// with its codec. A batch that loses none is kept byte for byte; one that
// loses all is dropped. Control batches are kept whole.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/keelmq/keel/internal/translate"
)

// cleanRecord is one record of a batch as the cleaner sees it.
type cleanRecord struct {
	offset    int64
	key       []byte // nil: no key
	tombstone bool   // a null value
	raw       []byte // the record's bytes with its length prefix
}

// eachCleanRecord calls fn for every record of the whole batch b, in
// order (decompressed up to limit bytes); a control batch has none. The
// slices alias b or its decompressed copy.
func eachCleanRecord(b []byte, limit int, fn func(cleanRecord)) error {
	_, err := walkRecords(b, limit, fn)
	return err
}

// walkRecords is eachCleanRecord that returns the uncompressed batch it
// walked (b itself when it was not compressed; nil for a control batch).
func walkRecords(b []byte, limit int, fn func(cleanRecord)) ([]byte, error) {
	h, err := parseBatchHeader(b)
	if err != nil {
		return nil, err
	}
	if h.attributes&attrControl != 0 {
		return nil, nil
	}
	u := b
	if translate.KafkaBatchCodec(b) != translate.CodecNone {
		if u, err = translate.RecompressKafkaBatch(b, translate.CodecNone, limit); err != nil {
			return nil, err
		}
	}
	recs := u[batchHeaderBytes:]
	for i := int32(0); i < h.records; i++ {
		r, rest, err := parseCleanRecord(recs, h.baseOffset)
		if err != nil {
			return nil, fmt.Errorf("kafka: record %d of the batch at %d: %w", i, h.baseOffset, err)
		}
		fn(r)
		recs = rest
	}
	if len(recs) != 0 {
		return nil, fmt.Errorf("kafka: %d bytes after the records of the batch at %d", len(recs), h.baseOffset)
	}
	return u, nil
}

// parseCleanRecord reads the record at the start of recs.
func parseCleanRecord(recs []byte, base int64) (cleanRecord, []byte, error) {
	l, n := binary.Varint(recs)
	if n <= 0 || l < 0 || l > int64(len(recs)-n) {
		return cleanRecord{}, nil, fmt.Errorf("bad length")
	}
	d := cleanDecoder{b: recs[n : n+int(l)]}
	r := cleanRecord{raw: recs[:n+int(l)]}
	if len(d.b) == 0 {
		return cleanRecord{}, nil, fmt.Errorf("empty record")
	}
	d.b = d.b[1:] // attributes
	d.varint()    // timestampDelta
	r.offset = base + d.varint()
	r.key, _ = d.bytes()
	_, null := d.bytes()
	r.tombstone = null
	if d.err != nil {
		return cleanRecord{}, nil, d.err
	}
	return r, recs[n+int(l):], nil
}

// cleanDecoder reads a record's varints and length-prefixed fields; the first
// error sticks.
type cleanDecoder struct {
	b   []byte
	err error
}

func (d *cleanDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes reads a length-prefixed field: nil and true for length -1.
func (d *cleanDecoder) bytes() ([]byte, bool) {
	l := d.varint()
	switch {
	case d.err != nil:
		return nil, false
	case l == -1:
		return nil, true
	case l < -1 || l > int64(len(d.b)):
		d.err = fmt.Errorf("field of %d bytes, %d left", l, len(d.b))
		return nil, false
	}
	v := d.b[:l:l]
	d.b = d.b[l:]
	return v, false
}

// filterBatch returns the batch b with only the records keep says stay:
// b itself when all stay (or a control batch), nil when none does, else
// the rewritten batch (a new slice).
func filterBatch(b []byte, limit int, keep func(cleanRecord) bool) ([]byte, error) {
	var kept [][]byte
	total := 0
	u, err := walkRecords(b, limit, func(r cleanRecord) {
		total++
		if keep(r) {
			kept = append(kept, r.raw)
		}
	})
	switch {
	case err != nil:
		return nil, err
	case u == nil || len(kept) == total:
		return b, nil
	case len(kept) == 0:
		return nil, nil
	}
	size := batchHeaderBytes
	for _, r := range kept {
		size += len(r)
	}
	out := make([]byte, batchHeaderBytes, size)
	copy(out, u[:batchHeaderBytes])
	for _, r := range kept {
		out = append(out, r...)
	}
	be := binary.BigEndian
	be.PutUint32(out[57:], uint32(len(kept)))
	be.PutUint32(out[8:], uint32(len(out)-12))
	be.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	if codec := translate.KafkaBatchCodec(b); codec != translate.CodecNone {
		return translate.RecompressKafkaBatch(out, codec, limit)
	}
	return out, nil
}

// batchHasTombstone reports whether the whole batch b holds a record with
// a null value.
func batchHasTombstone(b []byte, limit int) (bool, error) {
	has := false
	err := eachCleanRecord(b, limit, func(r cleanRecord) { has = has || r.tombstone })
	return has, err
}
