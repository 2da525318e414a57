// Package message is Keel's message model and its byte encodings: the stored
// MessageExt record (which is also the wire format of pull, query and view
// responses), the properties string, the client batch format, message IDs,
// tag hash codes, and the topic kinds (KindOfTopic: user, retry, dead-letter
// and system topics) by which the broker, the metrics, the admin client and
// the console all count topics.
//
// Stored record (magic V1, IPv4 hosts; add 12 bytes per IPv6 host field):
//
//	off  size  field
//	  0     4  TOTALSIZE         whole record length
//	  4     4  MAGICCODE         V1 = 0xDAA320A7
//	  8     4  BODYCRC           CRC32-IEEE(body) & 0x7FFFFFFF
//	 12     4  QUEUEID
//	 16     4  FLAG
//	 20     8  QUEUEOFFSET       logical offset in (topic, queueId)
//	 28     8  PHYSICALOFFSET    CommitLog offset of this record
//	 36     4  SYSFLAG
//	 40     8  BORNTIMESTAMP     ms
//	 48   4+4  BORNHOST          IP, port (16+4 if SYSFLAG&0x10)
//	 56     8  STORETIMESTAMP    ms
//	 64   4+4  STOREHOST         IP, port (16+4 if SYSFLAG&0x20)
//	 72     4  RECONSUMETIMES
//	 76     8  PREPARED_TX_OFFSET
//	 84     4  BODYLEN
//	 88     B  BODY
//	88+B    1  TOPICLEN          int8, <= 127
//	89+B    T  TOPIC
//	89+B+T  2  PROPLEN           int16, <= 32767
//	91+B+T  P  PROPERTIES        name\x01value\x02...
//
// TOTALSIZE = 91+B+T+P with IPv4 hosts (115+B+T+P with two IPv6 hosts). All
// integers are big-endian. IPv4-mapped IPv6 addresses are stored in the
// 4-byte form; the V6 SYSFLAG bits always match the host field sizes.
//
// Client batch body (SEND_BATCH_MESSAGE), one item per message, concatenated:
//
//	TOTALSIZE int32 | MAGICCODE int32 (0) | BODYCRC int32 (0) | FLAG int32 |
//	BODYLEN int32 | BODY | PROPLEN int16 | PROPERTIES      (22+B+P bytes)
//
// Message ids: the offset message id is the uppercase hex of store IP (4 or
// 16 bytes), port int32 and CommitLog offset int64 (32 or 56 characters). The
// UNIQ_KEY made by UniqIDGenerator is the uppercase hex of ip, pid int16, a
// random int32, ms since the start of the month int32 and a counter int16.
//
// Decoders (Check, Decode, DecodeBatch, Property, ParseOffsetMsgID) accept
// any input without panicking, use a length field only after checking it
// against the bytes that remain, and report malformed input with errors that
// wrap ErrCorrupt (ErrBadMsgID for ids) and name the field. View and its
// accessors do no checks of their own and must only wrap records that passed
// Check. Encoders append to a caller's buffer and do not allocate when it has
// room.
//
// Concurrency: everything here is a pure function of its arguments, except
// UniqIDGenerator, which is safe for concurrent use. A View or a decoded
// Message aliases the bytes it was made from; the caller must not modify them
// while it is in use.
package message
