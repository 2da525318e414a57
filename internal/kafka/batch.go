package kafka

// RecordBatch v2 checks (frontdoors.md 1.6). Layout, big-endian:
//
//	off size field
//	  0    8 baseOffset            assigned here (not covered by the CRC)
//	  8    4 batchLength           bytes after this field
//	 12    4 partitionLeaderEpoch  set to the leader's epoch here (not covered by the CRC; epochs.go)
//	 16    1 magic                 2
//	 17    4 crc                   CRC-32C of bytes 21..end
//	 21    2 attributes            bits 0-2 codec, 3 log-append time,
//	                               4 transactional, 5 control
//	 23    4 lastOffsetDelta       records-1
//	 27    8 baseTimestamp
//	 35    8 maxTimestamp
//	 43    8 producerId
//	 51    2 producerEpoch
//	 53    4 baseSequence
//	 57    4 recordsCount
//	 61    . records (compressed as one block when codec != 0)

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const batchHeaderBytes = 61

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type batchHeader struct {
	baseOffset      int64
	attributes      int16
	lastOffsetDelta int32
	records         int32
	producerID      int64
	epoch           int16
	baseSequence    int32
}

// parseBatchHeader reads the fields the store's readers need (kmsg's
// RecordBatch decoder) after checking the frame is one whole v2 batch.
func parseBatchHeader(b []byte) (batchHeader, error) {
	if len(b) < batchHeaderBytes {
		return batchHeader{}, fmt.Errorf("record batch of %d bytes, the header is %d", len(b), batchHeaderBytes)
	}
	if n := int64(int32(binary.BigEndian.Uint32(b[8:]))); n != int64(len(b)-12) {
		return batchHeader{}, fmt.Errorf("batchLength %d, %d bytes follow it (exactly one batch per partition)", n, len(b)-12)
	}
	if b[16] != 2 {
		return batchHeader{}, fmt.Errorf("magic %d (only record batches of magic 2 are supported)", int8(b[16]))
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		return batchHeader{}, fmt.Errorf("record batch: %v", err)
	}
	return batchHeader{baseOffset: rb.FirstOffset, attributes: rb.Attributes, lastOffsetDelta: rb.LastOffsetDelta,
		records: rb.NumRecords, producerID: rb.ProducerID, epoch: rb.ProducerEpoch, baseSequence: rb.FirstSequence}, nil
}

// batchError is a refused batch: its Kafka code and why.
type batchError struct {
	code int16
	msg  string
}

func (e *batchError) Error() string { return e.msg }

func refuse(code int16, format string, args ...any) *batchError {
	return &batchError{code: code, msg: fmt.Sprintf(format, args...)}
}

// checkBatch validates a produced batch: one whole v2 batch, its CRC-32C,
// codec, no control bit (a transactional batch is judged by the
// produce path, txn.go), lastOffsetDelta = count-1, at
// most maxBytes, and for an uncompressed batch that the records' lengths
// add up and their number is the count. Compressed records are stored as
// received without being decompressed (not checked yet; docs/kafka.md).
func checkBatch(b []byte, maxBytes int, produceVersion int16) (batchHeader, *batchError) {
	if len(b) > maxBytes {
		return batchHeader{}, refuse(errMessageTooLarge, "record batch of %d bytes exceeds max.message.bytes %d", len(b), maxBytes)
	}
	h, err := parseBatchHeader(b)
	if err != nil {
		return h, refuse(errCorruptMessage, "%v", err)
	}
	if want, got := binary.BigEndian.Uint32(b[17:]), crc32.Checksum(b[21:], castagnoli); want != got {
		return h, refuse(errCorruptMessage, "record batch CRC-32C %#08x, computed %#08x", want, got)
	}
	codec := h.attributes & 7
	switch {
	case codec > 4:
		return h, refuse(errCorruptMessage, "unknown compression codec %d", codec)
	case codec == 4 && produceVersion < 7:
		return h, refuse(errInvalidRecord, "zstd needs Produce v7 or later (got v%d)", produceVersion)
	case h.attributes&0x20 != 0:
		return h, refuse(errInvalidRecord, "control batches are written by the broker only")
	case h.records < 1 || h.lastOffsetDelta != h.records-1:
		return h, refuse(errInvalidRecord, "recordsCount %d with lastOffsetDelta %d", h.records, h.lastOffsetDelta)
	}
	if codec == 0 {
		if err := checkRecords(b[batchHeaderBytes:], h.records); err != nil {
			return h, refuse(errCorruptMessage, "%v", err)
		}
	}
	return h, nil
}

// checkRecords checks that recs is exactly n length-prefixed records.
func checkRecords(recs []byte, n int32) error {
	for i := int32(0); i < n; i++ {
		l, k := binary.Varint(recs)
		if k <= 0 || l < 0 || l > int64(len(recs)-k) {
			return fmt.Errorf("record %d of %d: bad length", i, n)
		}
		recs = recs[k+int(l):]
	}
	if len(recs) != 0 {
		return fmt.Errorf("%d bytes after the %d records", len(recs), n)
	}
	return nil
}

// assignBase sets the batch's base offset and leader epoch in place.
func assignBase(b []byte, base int64, epoch int32) {
	binary.BigEndian.PutUint64(b, uint64(base))
	binary.BigEndian.PutUint32(b[12:], uint32(epoch))
}

// attrLogAppendTime is the batch attribute bit of timestampType
// LogAppendTime.
const attrLogAppendTime = 0x08

// stampLogAppendTime marks a whole batch b as stamped with the log append
// time ms (attributes and maxTimestamp) and recomputes its CRC-32C, which
// covers both.
func stampLogAppendTime(b []byte, ms int64) {
	attrs := binary.BigEndian.Uint16(b[21:])
	binary.BigEndian.PutUint16(b[21:], attrs|attrLogAppendTime)
	binary.BigEndian.PutUint64(b[35:], uint64(ms))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
}
