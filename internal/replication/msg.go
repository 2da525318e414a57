package replication

import (
	"encoding/binary"
	"fmt"
)

// protocolVersion is the HELLO's version; a master refuses another.
const protocolVersion = 2

// maxEpochs bounds an epoch history on the wire and on disk.
const maxEpochs = 1 << 16

// hello is the replica's opening: who it is and what its log holds.
type hello struct {
	Version      uint16
	BrokerName   string
	BrokerID     int64
	SegmentBytes int64
	LogEnd       int64 // written offset
	SyncFlush    bool  // acks count flushed (else written) bytes
	// Empty: the log holds no record (LogEnd is where it starts, 0 for a
	// new replica, a segment start for one that started at its master's
	// first segment).
	Empty  bool
	Epochs History
	// Tail is the CRC trailer of the replica's last record (the 4 bytes
	// before LogEnd), or empty when LogEnd is 0 or a segment start.
	Tail []byte
}

// helloOK is the master's acceptance: its epoch history and log end,
// and where the replica's log last agrees with it. TruncateTo below the
// replica's log end tells it to truncate there (Tail: the master's CRC
// trailer of the record ending at TruncateTo, empty at 0 or a segment
// start) and reconnect; the master streams nothing on that connection.
type helloOK struct {
	MasterEnd  int64
	Epochs     History
	TruncateTo int64
	Tail       []byte
	// LogStart, to an empty replica whose log ends before the master's
	// first segment (retention deleted the ones before): start the log
	// there and reconnect.
	LogStart int64
}

// data is a raw CommitLog range at Offset (whole entries) of the master's
// epoch Epoch (which started at EpochStart), and the master's confirmed
// offset. An empty range is a heartbeat.
type data struct {
	Epoch      uint32
	EpochStart int64
	Offset     int64
	Confirmed  int64
	Raw        []byte
}

// ack: the replica's written and flushed ends.
type ack struct{ Written, Flushed int64 }

type enc struct{ b []byte }

func (e *enc) u8(v byte)    { e.b = append(e.b, v) }
func (e *enc) u16(v uint16) { e.b = binary.BigEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) i64(v int64)  { e.b = binary.BigEndian.AppendUint64(e.b, uint64(v)) }
func (e *enc) str(s string) { e.u16(uint16(len(s))); e.b = append(e.b, s...) }
func (e *enc) epochs(h History) {
	e.u32(uint32(len(h)))
	for _, x := range h {
		e.u32(x.Epoch)
		e.i64(x.Start)
	}
}

// dec reads a payload; the first problem sticks (err) and later reads
// return zeros.
type dec struct {
	b   []byte
	err error
}

func (d *dec) need(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.err = fmt.Errorf("%w: payload ends %d bytes early", ErrMalformed, n-len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8() byte {
	if v := d.need(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *dec) u16() uint16 {
	if v := d.need(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (d *dec) u32() uint32 {
	if v := d.need(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

// off reads an offset, which must not be negative.
func (d *dec) off() int64 {
	v := d.need(8)
	if v == nil {
		return 0
	}
	x := int64(binary.BigEndian.Uint64(v))
	if x < 0 {
		d.err = fmt.Errorf("%w: negative offset", ErrMalformed)
		return 0
	}
	return x
}

func (d *dec) str() string { return string(d.need(int(d.u16()))) }

func (d *dec) epochs() History {
	n := d.u32()
	if d.err == nil && (n > maxEpochs || int(n)*12 > len(d.b)) {
		d.err = fmt.Errorf("%w: %d epochs in %d bytes", ErrMalformed, n, len(d.b))
	}
	if d.err != nil {
		return nil
	}
	h := make(History, n)
	for i := range h {
		h[i] = Epoch{Epoch: d.u32(), Start: d.off()}
	}
	if d.err == nil {
		if err := h.Valid(); err != nil {
			d.err = fmt.Errorf("%w: %w", ErrMalformed, err)
		}
	}
	return h
}

// end fails if bytes are left over.
func (d *dec) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d bytes after the message", ErrMalformed, len(d.b))
	}
	return d.err
}

func (m hello) encode() []byte {
	var e enc
	e.u16(m.Version)
	e.str(m.BrokerName)
	e.i64(m.BrokerID)
	e.i64(m.SegmentBytes)
	e.i64(m.LogEnd)
	flags := byte(0)
	if m.SyncFlush {
		flags |= 1
	}
	if m.Empty {
		flags |= 2
	}
	e.u8(flags)
	e.epochs(m.Epochs)
	e.u8(byte(len(m.Tail)))
	e.b = append(e.b, m.Tail...)
	return e.b
}

func decodeHello(p []byte) (hello, error) {
	d := dec{b: p}
	m := hello{Version: d.u16(), BrokerName: d.str(), BrokerID: d.off(), SegmentBytes: d.off(), LogEnd: d.off()}
	flags := d.u8()
	m.SyncFlush, m.Empty = flags&1 != 0, flags&2 != 0
	if d.err == nil && flags&^3 != 0 {
		d.err = fmt.Errorf("%w: unknown hello flags %#x", ErrMalformed, flags)
	}
	m.Epochs = d.epochs()
	if n := d.u8(); d.err == nil && n != 0 && n != tailBytes {
		d.err = fmt.Errorf("%w: hello tail of %d bytes", ErrMalformed, n)
	} else if n == tailBytes {
		m.Tail = d.need(tailBytes)
	}
	return m, d.end()
}

// tailBytes is the size of a hello's tail: a record's CRC trailer.
const tailBytes = 4

func (m helloOK) encode() []byte {
	var e enc
	e.i64(m.MasterEnd)
	e.epochs(m.Epochs)
	e.i64(m.TruncateTo)
	e.u8(byte(len(m.Tail)))
	e.b = append(e.b, m.Tail...)
	e.i64(m.LogStart)
	return e.b
}

func decodeHelloOK(p []byte) (helloOK, error) {
	d := dec{b: p}
	m := helloOK{MasterEnd: d.off(), Epochs: d.epochs(), TruncateTo: d.off()}
	if n := d.u8(); d.err == nil && n != 0 && n != tailBytes {
		d.err = fmt.Errorf("%w: hello_ok tail of %d bytes", ErrMalformed, n)
	} else if n == tailBytes {
		m.Tail = d.need(tailBytes)
	}
	m.LogStart = d.off()
	if d.err == nil && m.TruncateTo > m.MasterEnd {
		d.err = fmt.Errorf("%w: truncation point %d past the master's end %d", ErrMalformed, m.TruncateTo, m.MasterEnd)
	}
	return m, d.end()
}

// Reject codes: whether the replica may try again.
const (
	rejectRetry    byte = 1 // a transient refusal: try again later
	rejectConfig   byte = 2 // the replica's configuration does not match the master's
	rejectDiverged byte = 3 // the replica's log diverged from the master's
)

func encodeReject(code byte, reason string) []byte {
	if len(reason) > 4096 {
		reason = reason[:4096]
	}
	var e enc
	e.u8(code)
	e.str(reason)
	return e.b
}

func decodeReject(p []byte) (byte, string, error) {
	d := dec{b: p}
	code := d.u8()
	s := d.str()
	if d.err == nil && (code < rejectRetry || code > rejectAuth) {
		d.err = fmt.Errorf("%w: unknown reject code %d", ErrMalformed, code)
	}
	return code, s, d.end()
}

// appendData appends the DATA header and raw to dst (the frame payload).
func (m data) appendTo(dst []byte) []byte {
	e := enc{b: dst}
	e.u32(m.Epoch)
	e.i64(m.EpochStart)
	e.i64(m.Offset)
	e.i64(m.Confirmed)
	e.b = append(e.b, m.Raw...)
	return e.b
}

func decodeData(p []byte) (data, error) {
	d := dec{b: p}
	m := data{Epoch: d.u32(), EpochStart: d.off(), Offset: d.off(), Confirmed: d.off()}
	if d.err == nil && m.EpochStart > m.Offset {
		d.err = fmt.Errorf("%w: epoch %d starts at %d, after the data at %d", ErrMalformed, m.Epoch, m.EpochStart, m.Offset)
	}
	m.Raw = d.b
	return m, d.err
}

func (m ack) encode() []byte {
	var e enc
	e.i64(m.Written)
	e.i64(m.Flushed)
	return e.b
}

func decodeAck(p []byte) (ack, error) {
	d := dec{b: p}
	m := ack{Written: d.off(), Flushed: d.off()}
	if d.err == nil && m.Flushed > m.Written {
		d.err = fmt.Errorf("%w: flushed %d above written %d", ErrMalformed, m.Flushed, m.Written)
	}
	return m, d.end()
}
