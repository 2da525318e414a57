package translate

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// A Kafka RecordBatch (magic 2), big-endian:
//
//	off size field
//	  0    8 baseOffset
//	  8    4 batchLength (bytes after this field)
//	 12    4 partitionLeaderEpoch
//	 16    1 magic = 2
//	 17    4 crc (CRC-32C of everything from attributes to the end)
//	 21    2 attributes (bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control)
//	 23    4 lastOffsetDelta
//	 27    8 firstTimestamp
//	 35    8 maxTimestamp
//	 43    8 producerId
//	 51    2 producerEpoch
//	 53    4 baseSequence
//	 57    4 recordsCount
//	 61    . records (compressed as a whole when the codec is not none)
//
// A record: length varint, attributes int8, timestampDelta varlong,
// offsetDelta varint, key (varint length, -1 null), value (likewise),
// header count varint, each header a key (varint length) and a value
// (varint length, -1 null).
const (
	batchHeaderBytes = 61
	attrCodecMask    = 0x07
	attrLogAppend    = 0x08
	attrControl      = 0x20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// KafkaRecord is one record of a batch, decoded. Key and Value are nil
// when null; slices alias the batch (or its inflated copy).
type KafkaRecord struct {
	Offset    int64
	Timestamp int64 // ms
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Header is one Kafka header or RocketMQ property or AMQP header: a
// name and a value (nil: a Kafka header with a null value).
type Header struct {
	Key   string
	Value []byte
}

// kafkaBatchInfo is what the header of a batch says.
type kafkaBatchInfo struct {
	baseOffset     int64
	lastDelta      int32
	firstTimestamp int64
	maxTimestamp   int64
	attrs          int16
	count          int32
}

// parseKafkaHeader checks the fixed part of a batch.
func parseKafkaHeader(b []byte) (kafkaBatchInfo, error) {
	var h kafkaBatchInfo
	if len(b) < batchHeaderBytes {
		return h, fmt.Errorf("%w: Kafka batch of %d bytes, the header is %d", ErrMalformed, len(b), batchHeaderBytes)
	}
	be := binary.BigEndian
	if l := int64(int32(be.Uint32(b[8:]))); l != int64(len(b)-12) {
		return h, fmt.Errorf("%w: Kafka batchLength %d, %d bytes follow", ErrMalformed, l, len(b)-12)
	}
	if b[16] != 2 {
		return h, fmt.Errorf("%w: Kafka batch magic %d (only 2 is read)", ErrMalformed, b[16])
	}
	if got, want := crc32.Checksum(b[21:], castagnoli), be.Uint32(b[17:]); got != want {
		return h, fmt.Errorf("%w: Kafka batch CRC %#08x, the bytes give %#08x", ErrMalformed, want, got)
	}
	h.baseOffset = int64(be.Uint64(b[0:]))
	h.attrs = int16(be.Uint16(b[21:]))
	h.lastDelta = int32(be.Uint32(b[23:]))
	h.firstTimestamp = int64(be.Uint64(b[27:]))
	h.maxTimestamp = int64(be.Uint64(b[35:]))
	h.count = int32(be.Uint32(b[57:]))
	if h.count < 0 || h.lastDelta < 0 {
		return h, fmt.Errorf("%w: Kafka batch of %d records, lastOffsetDelta %d", ErrMalformed, h.count, h.lastDelta)
	}
	return h, nil
}

// EachKafkaRecord decodes the batch b (magic 2, as stored) and calls fn for
// every record in order. A compressed batch is inflated first, refused
// with ErrTooLarge if it inflates beyond limit bytes; fn's slices alias b
// or the inflated copy and must not be kept after fn returns unless
// copied. A control batch (transaction markers) has no user records: fn
// is not called. The record's timestamp is the batch's maxTimestamp when
// the batch says LogAppendTime. It never panics, whatever b holds.
func EachKafkaRecord(b []byte, limit int, fn func(*KafkaRecord) error) error {
	return eachKafkaRecord(b, limit, nil, fn)
}

// eachKafkaRecord is EachKafkaRecord inflating a compressed batch over
// *scratch (when not nil; left holding the grown buffer), so that a caller
// that keeps nothing fn sees can reuse one buffer for every batch.
func eachKafkaRecord(b []byte, limit int, scratch *[]byte, fn func(*KafkaRecord) error) error {
	h, err := parseKafkaHeader(b)
	if err != nil {
		return err
	}
	if h.attrs&attrControl != 0 {
		return nil
	}
	codec := int(h.attrs & attrCodecMask)
	var data []byte
	if scratch != nil && codec != codecNone {
		data, err = inflateInto(*scratch, codec, b[batchHeaderBytes:], limit)
		if cap(data) > cap(*scratch) {
			*scratch = data[:0]
		}
	} else {
		data, err = inflate(codec, b[batchHeaderBytes:], limit)
	}
	if err != nil {
		return err
	}
	// A record is at least 7 bytes: a count beyond what the data can hold
	// is corrupt, and is refused before anything is allocated for it.
	if int64(h.count) > int64(len(data))/7+1 {
		return fmt.Errorf("%w: Kafka batch says %d records in %d bytes", ErrMalformed, h.count, len(data))
	}
	var r KafkaRecord
	d := decoder{b: data}
	for i := range h.count {
		n := d.varint()
		if d.err != nil || n < 0 || n > int64(len(d.b)) {
			return fmt.Errorf("%w: Kafka record %d: length %d, %d bytes left", ErrMalformed, i, n, len(d.b))
		}
		rd := decoder{b: d.b[:n]}
		d.b = d.b[n:]
		rd.byte1() // attributes: unused
		tsDelta := rd.varint()
		offDelta := rd.varint()
		r.Key = rd.bytes()
		r.Value = rd.bytes()
		nh := rd.varint()
		if rd.err == nil && (nh < 0 || nh > int64(len(rd.b))/2) {
			return fmt.Errorf("%w: Kafka record %d: %d headers in %d bytes", ErrMalformed, i, nh, len(rd.b))
		}
		r.Headers = r.Headers[:0]
		for j := int64(0); j < nh && rd.err == nil; j++ {
			k := rd.bytes()
			v := rd.bytes()
			if k == nil && rd.err == nil {
				rd.err = fmt.Errorf("header %d has a null key", j)
			}
			r.Headers = append(r.Headers, Header{Key: string(k), Value: v})
		}
		if rd.err != nil {
			return fmt.Errorf("%w: Kafka record %d: %v", ErrMalformed, i, rd.err)
		}
		if len(rd.b) != 0 {
			return fmt.Errorf("%w: Kafka record %d: %d bytes past its end", ErrMalformed, i, len(rd.b))
		}
		r.Offset = h.baseOffset + offDelta
		r.Timestamp = h.firstTimestamp + tsDelta
		if h.attrs&attrLogAppend != 0 {
			r.Timestamp = h.maxTimestamp
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: Kafka batch: %d bytes after its %d records", ErrMalformed, len(d.b), h.count)
	}
	return nil
}

// decoder reads Kafka's zig-zag varints and length-prefixed fields; the
// first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("bad varint")
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte1() {
	if d.err == nil && len(d.b) == 0 {
		d.err = fmt.Errorf("truncated")
	}
	if d.err == nil {
		d.b = d.b[1:]
	}
}

// bytes reads a length-prefixed field; nil for length -1.
func (d *decoder) bytes() []byte {
	n := d.varint()
	switch {
	case d.err != nil:
		return nil
	case n == -1:
		return nil
	case n < -1 || n > int64(len(d.b)):
		d.err = fmt.Errorf("field of %d bytes, %d left", n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// AppendKafkaBatch appends to dst one uncompressed RecordBatch (magic 2,
// CRC-32C, CreateTime, no producer id) holding recs, whose offsets must
// be consecutive from recs[0].Offset (the batch's base offset). It
// returns dst unchanged for no records.
func AppendKafkaBatch(dst []byte, recs []KafkaRecord) []byte {
	var w KafkaBatchWriter
	for i := range recs {
		dst = w.Append(dst, &recs[i])
	}
	return w.Close(dst)
}

// KafkaBatchWriter writes one batch record by record at the end of a
// buffer: Append opens it (at the first record's offset) and adds
// records, Close writes the header's counts, length and CRC. Between them
// the buffer must grow only through Append; to take back the last Append,
// cut the buffer to its length before it and restore a copy of the
// writer made then.
type KafkaBatchWriter struct {
	open       bool
	start      int // position of the batch in the buffer
	base, next int64
	first, max int64 // timestamps
	n          int32
	scratch    []byte
}

// Open reports whether a batch is open; Next is the offset its next
// record must have.
func (w *KafkaBatchWriter) Open() bool  { return w.open }
func (w *KafkaBatchWriter) Next() int64 { return w.next }

// Append adds r to the open batch, opening one at r.Offset if none is.
// r.Offset must be Next() when a batch is open.
func (w *KafkaBatchWriter) Append(dst []byte, r *KafkaRecord) []byte {
	be := binary.BigEndian
	if !w.open {
		w.open, w.start, w.base, w.next, w.first, w.max, w.n = true, len(dst), r.Offset, r.Offset, r.Timestamp, r.Timestamp, 0
		dst = be.AppendUint64(dst, uint64(r.Offset))
		dst = be.AppendUint32(dst, 0) // batchLength, at Close
		dst = be.AppendUint32(dst, 0) // partitionLeaderEpoch
		dst = append(dst, 2)
		dst = be.AppendUint32(dst, 0) // crc, at Close
		dst = be.AppendUint16(dst, 0) // attributes: no codec, CreateTime
		dst = be.AppendUint32(dst, 0) // lastOffsetDelta
		dst = be.AppendUint64(dst, uint64(r.Timestamp))
		dst = be.AppendUint64(dst, uint64(r.Timestamp))
		dst = be.AppendUint64(dst, ^uint64(0)) // producerId -1
		dst = be.AppendUint16(dst, 0xFFFF)     // producerEpoch -1
		dst = be.AppendUint32(dst, 0xFFFFFFFF) // baseSequence -1
		dst = be.AppendUint32(dst, 0)          // recordsCount
	}
	body := w.scratch[:0]
	body = append(body, 0) // attributes
	body = binary.AppendVarint(body, r.Timestamp-w.first)
	body = binary.AppendVarint(body, r.Offset-w.base)
	body = appendField(body, r.Key)
	body = appendField(body, r.Value)
	body = binary.AppendVarint(body, int64(len(r.Headers)))
	for _, h := range r.Headers {
		body = binary.AppendVarint(body, int64(len(h.Key)))
		body = append(body, h.Key...)
		body = appendField(body, h.Value)
	}
	w.scratch = body
	dst = binary.AppendVarint(dst, int64(len(body)))
	dst = append(dst, body...)
	w.n++
	w.next = r.Offset + 1
	w.max = max(w.max, r.Timestamp)
	return dst
}

// Close finishes the open batch (length and CRC); nothing if none is.
func (w *KafkaBatchWriter) Close(dst []byte) []byte {
	if !w.open {
		return dst
	}
	w.open = false
	b := dst[w.start:]
	be := binary.BigEndian
	be.PutUint32(b[23:], uint32(w.next-1-w.base))
	be.PutUint64(b[35:], uint64(w.max))
	be.PutUint32(b[57:], uint32(w.n))
	be.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return dst
}

func appendField(dst, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(v)))
	return append(dst, v...)
}
