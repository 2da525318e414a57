package message

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// BatchItem is one message of a client batch body.
type BatchItem struct {
	Flag       int32
	Body       []byte // aliases the batch body
	Properties string
}

// batchItemFixedBytes is the size of a batch item without body and
// properties: TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN, PROPLEN.
const batchItemFixedBytes = 4 + 4 + 4 + 4 + 4 + 2

// rawBatchItem is a parsed batch item whose fields alias the batch body.
type rawBatchItem struct {
	flag        int32
	body, props []byte
}

// MaxBatchMessages bounds the messages of one client batch. Each becomes a
// decoded message and a stored record (a few hundred bytes of memory
// whatever its size on the wire, where an empty item is 22 bytes), so the
// count, not the body's size, is what bounds a batch request's memory.
const MaxBatchMessages = 65536

// BatchLen validates a client batch body as DecodeBatch does and returns
// its number of messages, refusing more than MaxBatchMessages before
// anything is allocated for them.
func BatchLen(body []byte) (int, error) {
	if len(body) == 0 {
		return 0, corrupt("empty batch")
	}
	n := 0
	for off := 0; off < len(body); n++ {
		if n == MaxBatchMessages {
			return 0, fmt.Errorf("%w: a batch of more than %d messages", ErrTooLarge, MaxBatchMessages)
		}
		_, next, err := parseBatchItem(body, off, n)
		if err != nil {
			return 0, err
		}
		off = next
	}
	return n, nil
}

// DecodeBatch walks a client batch body (TOTALSIZE, MAGIC, BODYCRC, FLAG,
// BODYLEN, BODY, PROPLEN int16, PROPERTIES per message), calling fn for each.
// It never allocates a claimed size larger than the input.
//
// MAGICCODE and BODYCRC are ignored, as the Java broker does (clients write
// 0). TOTALSIZE must equal the item's size. The whole body is validated before
// fn is first called, so a corrupt batch is rejected without side effects. An
// empty body is corrupt. An error from fn stops the walk and is returned as is.
func DecodeBatch(body []byte, fn func(BatchItem) error) error {
	if len(body) == 0 {
		return corrupt("empty batch")
	}
	for off, i := 0, 0; off < len(body); i++ {
		_, next, err := parseBatchItem(body, off, i)
		if err != nil {
			return err
		}
		off = next
	}
	for off, i := 0, 0; off < len(body); i++ {
		it, next, _ := parseBatchItem(body, off, i)
		err := fn(BatchItem{Flag: it.flag, Body: it.body, Properties: string(it.props)})
		if err != nil {
			return err
		}
		off = next
	}
	return nil
}

// parseBatchItem parses item number i of body, which starts at off, and
// returns it with the offset of the next item.
func parseBatchItem(body []byte, off, i int) (rawBatchItem, int, error) {
	var it rawBatchItem
	rest := body[off:]
	if len(rest) < batchItemFixedBytes {
		return it, 0, corrupt("batch item %d at offset %d: %d bytes left, minimum %d",
			i, off, len(rest), batchItemFixedBytes)
	}
	be := binary.BigEndian
	total := int64(int32(be.Uint32(rest)))
	if total < batchItemFixedBytes || total > int64(len(rest)) {
		return it, 0, corrupt("batch item %d at offset %d: TOTALSIZE %d, %d bytes left", i, off, total, len(rest))
	}
	rest = rest[:total]
	it.flag = int32(be.Uint32(rest[12:]))
	bodyLen := int64(int32(be.Uint32(rest[16:])))
	if bodyLen < 0 || bodyLen > total-batchItemFixedBytes {
		return it, 0, corrupt("batch item %d at offset %d: BODYLEN %d, TOTALSIZE %d", i, off, bodyLen, total)
	}
	bodyEnd := 20 + int(bodyLen)
	it.body = rest[20:bodyEnd:bodyEnd]
	propsLen := int(int16(be.Uint16(rest[bodyEnd:])))
	if propsLen < 0 || bodyEnd+2+propsLen != len(rest) {
		return it, 0, corrupt("batch item %d at offset %d: PROPLEN %d, TOTALSIZE %d", i, off, propsLen, total)
	}
	it.props = rest[bodyEnd+2:]
	return it, off + int(total), nil
}

// AppendBatchItem appends it in the client batch format (MAGICCODE and
// BODYCRC 0, as the clients write them) and returns the extended slice.
func AppendBatchItem(dst []byte, it BatchItem) ([]byte, error) {
	if len(it.Properties) > MaxPropertiesBytes {
		return dst, fmt.Errorf("%w: properties are %d bytes, limit %d", ErrTooLarge, len(it.Properties), MaxPropertiesBytes)
	}
	size := batchItemFixedBytes + len(it.Body) + len(it.Properties)
	if size > math.MaxInt32 {
		return dst, fmt.Errorf("%w: batch item is %d bytes", ErrTooLarge, size)
	}
	dst = slices.Grow(dst, size)
	be := binary.BigEndian
	dst = be.AppendUint32(dst, uint32(size))
	dst = be.AppendUint32(dst, 0)
	dst = be.AppendUint32(dst, 0)
	dst = be.AppendUint32(dst, uint32(it.Flag))
	dst = be.AppendUint32(dst, uint32(len(it.Body)))
	dst = append(dst, it.Body...)
	dst = be.AppendUint16(dst, uint16(len(it.Properties)))
	return append(dst, it.Properties...), nil
}

// EncodeBatch returns the client batch body of items.
func EncodeBatch(items []BatchItem) ([]byte, error) {
	var b []byte
	for i, it := range items {
		var err error
		if b, err = AppendBatchItem(b, it); err != nil {
			return nil, fmt.Errorf("message: batch item %d: %w", i, err)
		}
	}
	return b, nil
}
