// Package message is Keel's message model and its byte encodings: the stored
// MessageExt record (which is also the wire format of pull, query and view
// responses), the properties string, the client batch format, message IDs and
// tag hash codes.
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
// All integers are big-endian.
package message
