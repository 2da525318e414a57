package message

// This file lists the package API other packages are written against. Each
// function is implemented in its own file by the owner of this package; the
// stubs here are removed as they are implemented.

import (
	"errors"
	"net/netip"
)

// ErrCorrupt is returned (wrapped) for a record or batch that does not parse.
var ErrCorrupt = errors.New("message: corrupt record")

// StoredSize returns the size of m's stored record (TOTALSIZE).
func (m *Message) StoredSize() int { panic("unimplemented") }

// AppendStored appends m's stored record to dst and returns the extended
// slice. It computes BODYCRC and sets the host V6 sysflag bits. It returns an
// error for a topic longer than MaxTopicBytes or properties longer than
// MaxPropertiesBytes.
func (m *Message) AppendStored(dst []byte) ([]byte, error) { panic("unimplemented") }

// PatchStored rewrites QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP of an
// encoded record in place.
func PatchStored(rec []byte, queueOffset, physOffset, storeTimestamp int64) {
	panic("unimplemented")
}

// Check validates the structure of one stored record (size fields agree with
// len(rec), magic, topic and properties lengths). It does not check BODYCRC.
func Check(rec []byte) error { panic("unimplemented") }

// Decode parses a stored record. Body aliases rec.
func Decode(rec []byte) (*Message, error) { panic("unimplemented") }

// View gives allocation-free access to the fields of a record that passed
// Check.
type View []byte

func (v View) TotalSize() int32          { panic("unimplemented") }
func (v View) QueueID() int32            { panic("unimplemented") }
func (v View) QueueOffset() int64        { panic("unimplemented") }
func (v View) PhysOffset() int64         { panic("unimplemented") }
func (v View) SysFlag() int32            { panic("unimplemented") }
func (v View) BornTimestamp() int64      { panic("unimplemented") }
func (v View) StoreTimestamp() int64     { panic("unimplemented") }
func (v View) ReconsumeTimes() int32     { panic("unimplemented") }
func (v View) Body() []byte              { panic("unimplemented") }
func (v View) Topic() []byte             { panic("unimplemented") }
func (v View) Properties() []byte        { panic("unimplemented") }
func (v View) StoreHost() netip.AddrPort { panic("unimplemented") }

// Property returns the value of key in an encoded properties string.
func Property[T string | []byte](props T, key string) (T, bool) { panic("unimplemented") }

// SetProperty returns props with key set to value (replacing an existing one).
func SetProperty(props, key, value string) string { panic("unimplemented") }

// DeleteProperty returns props without key.
func DeleteProperty(props, key string) string { panic("unimplemented") }

// ParseProperties decodes an encoded properties string; items without exactly
// one \x01 are skipped, as the official clients do.
func ParseProperties(props string) map[string]string { panic("unimplemented") }

// EncodeProperties encodes m with keys sorted, each item ending in \x02.
func EncodeProperties(m map[string]string) string { panic("unimplemented") }

// TagsCode is the ConsumeQueue tag hash of a tag: Java's String.hashCode over
// UTF-16 code units, sign-extended to int64; 0 for an empty tag.
func TagsCode(tag string) int64 { panic("unimplemented") }

// OffsetMsgID is the offset message ID: uppercase hex of store IP (4 or 16
// bytes), port (int32) and CommitLog offset (int64).
func OffsetMsgID(storeHost netip.AddrPort, physOffset int64) string { panic("unimplemented") }

// ParseOffsetMsgID reverses OffsetMsgID (32 or 56 hex characters).
func ParseOffsetMsgID(id string) (netip.AddrPort, int64, error) { panic("unimplemented") }

// UniqIDGenerator makes UNIQ_KEY values for messages that arrive without one.
type UniqIDGenerator struct{ _ [0]func() }

// NewUniqIDGenerator returns a generator prefixed with ip and the process id.
func NewUniqIDGenerator(ip netip.Addr) *UniqIDGenerator { panic("unimplemented") }

// Next returns a new unique ID (32 hex characters for an IPv4 ip).
func (g *UniqIDGenerator) Next() string { panic("unimplemented") }

// BatchItem is one message of a client batch body.
type BatchItem struct {
	Flag       int32
	Body       []byte // aliases the batch body
	Properties string
}

// DecodeBatch walks a client batch body (TOTALSIZE, MAGIC, BODYCRC, FLAG,
// BODYLEN, BODY, PROPLEN int16, PROPERTIES per message), calling fn for each.
// It never allocates a claimed size larger than the input.
func DecodeBatch(body []byte, fn func(BatchItem) error) error { panic("unimplemented") }

// Property keys (wire spelling).
const (
	PropKeys                           = "KEYS"
	PropTags                           = "TAGS"
	PropWaitStoreMsgOK                 = "WAIT"
	PropDelayLevel                     = "DELAY"
	PropRetryTopic                     = "RETRY_TOPIC"
	PropRealTopic                      = "REAL_TOPIC"
	PropRealQueueID                    = "REAL_QID"
	PropTransactionPrepared            = "TRAN_MSG"
	PropProducerGroup                  = "PGROUP"
	PropTransactionID                  = "__transactionId__"
	PropTransactionCheckTimes          = "TRANSACTION_CHECK_TIMES"
	PropCheckImmunitySeconds           = "CHECK_IMMUNITY_TIME_IN_SECONDS"
	PropUniqKey                        = "UNIQ_KEY"
	PropOriginMessageID                = "ORIGIN_MESSAGE_ID"
	PropReconsumeTime                  = "RECONSUME_TIME"
	PropMaxReconsumeTimes              = "MAX_RECONSUME_TIMES"
	PropCluster                        = "CLUSTER"
	PropMsgRegion                      = "MSG_REGION"
	PropTraceOn                        = "TRACE_ON"
	PropTimerDeliverMs                 = "TIMER_DELIVER_MS"
	PropTimerDelaySec                  = "TIMER_DELAY_SEC"
	PropTimerDelayMs                   = "TIMER_DELAY_MS"
	PropTimerOutMs                     = "TIMER_OUT_MS"
	PropTimerEnqueueMs                 = "TIMER_ENQUEUE_MS"
	PropCorrelationID                  = "CORRELATION_ID"
	PropReplyToClient                  = "REPLY_TO_CLIENT"
	PropMsgType                        = "MSG_TYPE"
	PropTransactionPreparedQueueOffset = "TRAN_PREPARED_QUEUE_OFFSET"
)
