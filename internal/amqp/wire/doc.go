// Package wire is AMQP 0-9-1's byte layer: frames, the primitive types,
// field tables with RabbitMQ's type codes, and the methods and content
// properties generated from the protocol's XML definition
// (methods_gen.go, written by ./gen from gen/amqp0-9-1.stripped.extended.xml;
// run go generate after changing the generator).
//
// # Frames
//
//	off  size  field
//	  0     1  type     1 method, 2 content header, 3 body, 8 heartbeat
//	  1     2  channel
//	  3     4  size     S, payload bytes (<= the negotiated frame-max - 8)
//	  7     S  payload
//	7+S     1  end      0xCE
//
// A method payload is class-id (2), method-id (2) and the arguments; a
// content header payload is class-id (2), weight (2, zero), body size (8)
// and the property flags and properties.
//
// # Field tables
//
// A table is a long (4) byte count and then name (shortstr), type code
// (1) and value, repeated. The type codes are RabbitMQ's (its 0-9-1
// errata, section 3), which every client in use writes, not the 0-9-1
// text's:
//
//	t bool  b int8  B uint8  s int16  u uint16  I int32  i uint32
//	l int64  f float32  d float64  D Decimal  S []byte (longstr)
//	A []any (array, a long byte count then type+value items)
//	T Timestamp  F Table  V nil  x Binary
//
// # Limits and errors
//
// Nothing here panics on any input: a Reader keeps the first error
// (ErrMalformed wrapped with what was wrong) and returns zero values
// after it. ReadFrame refuses a frame above its maxBytes before
// allocating it. Tables and arrays nest at most MaxTableDepth levels
// deep. A table decodes to at most TableAllocPerByte bytes of heap per
// byte it spans on the wire plus TableAllocSlackBytes: the fields or
// elements of each table and array are counted before its map or slice
// is made at that size, and every value is charged an upper bound of its
// cost against that allowance; a table over it is ErrMalformed.
package wire

//go:generate go run ./gen -spec gen/amqp0-9-1.stripped.extended.xml -out methods_gen.go
