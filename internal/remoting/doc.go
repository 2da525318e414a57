// Package remoting implements RocketMQ's classic TCP "remoting" protocol:
// the frame codec, a server that dispatches requests to a Handler, and a
// small client; and RocketMQ's wire constants, each defined once for the
// broker, the engines, admin and bench (codes.go: request and response
// codes, Keel's private ones such as ReqListTransactions; headers.go: pull
// sysFlag bits, send header keys). It knows nothing of storage or brokers
// (of Keel's packages it imports only doorstats, its listener's traffic
// counters).
//
// # Frame
//
//	+-----------+------------+-------------+-------------------+-------------+
//	| length(4) | serType(1) | hdrLen(3)   | header (hdrLen B) | body        |
//	+-----------+------------+-------------+-------------------+-------------+
//	length = 4 + hdrLen + len(body); the length field itself is not counted.
//	(Outgoing, body = Command.Body followed by every Command.BodyParts part.)
//
// All integers are big-endian. serType 0 is a JSON header, 1 the ROCKETMQ
// binary header:
//
//	code int16 | language int8 | version int16 | opaque int32 | flag int32 |
//	remarkLen int32 | remark | extLen int32 | { keyLen int16 | key | valLen int32 | val }*
//
// Both header types are decoded; a response is encoded in the serialize
// type of the request it answers. JSON headers are written with extFields
// values as strings only and code/version as int16, because the official Go
// client drops any frame that violates either rule. The official Go client
// never sets the oneway flag on requests it does not want answered, so a
// handler answers every request that is not flagged oneway. A JSON header
// in the shape the clients write (no white space, each known key once,
// integers plain, ext values strings under distinct keys) is decoded in
// one pass (json_fast.go); any other header by the general walk
// (json_decode.go), which gives the same command for every header the
// first takes (tested and fuzzed against each other).
//
// Decoding is bounded by what arrived: a header decodes to at most about
// four bytes of heap per header byte plus a constant (one copy of the
// header backs every key and value; escaped strings are decoded once). A
// header with more than MaxExtFields ext fields, or a JSON header with more
// than maxJSONHeaderKeys keys, fails with ErrHeaderLimit before a map is
// made for them (a ROCKETMQ header, or a JSON header above
// precountHeaderBytes, before it is copied), and the connection is closed
// with a log line naming the limit, as RocketMQ closes a connection whose
// frame does not decode.
//
// A handler may list request codes whose ext fields it reads only through
// Command's accessors (ExtLister): a JSON header of such a request keeps
// its ext fields (at most 32; more go to the map) as one list instead of a
// map, and ExtFields stays nil.
//
// # Concurrency
//
// A Conn (server or client side) owns one reader goroutine and one writer
// goroutine. The writer batches queued frames into one vectored write. Every
// inbound request runs on a goroutine of its own (a connection reuses the
// goroutines of finished requests), except those an InlineRunner handler
// has the reader run itself (a BurstRunner's several at once: those it
// finds buffered one after the other); at most MaxInflightPerConn run at once per
// connection, and when that bound is reached the reader stops reading,
// which pushes back on the peer through TCP flow control.
// Responses are matched to requests only by opaque. All exported methods of
// Conn, Server and Client are safe for concurrent use.
//
// A handler may answer after it returns (Conn.Defer, then Reply.Send from
// any goroutine, which never blocks): the request keeps its in-flight slot
// and its place in the budget until then, but no goroutine. A client waits
// for a response (Invoke) or has it delivered to a callback on the
// connection's reader (InvokeAsync; deadlines are swept every 100 ms).
//
// Memory per connection is bounded by a byte budget for responses
// (ServerConfig.MaxQueuedBytesPerConn, 16 MiB by default; see outBudget):
// a response that does not fit waits before it is queued (the handler, or
// the caller of WriteResponse, blocks), and the reader stops taking new
// requests while the queued and waiting bytes plus an estimate for every
// running handler would exceed it. A peer that stops reading thus holds
// about one budget of responses (Command.HeldBytes counts lent buffers at
// their full size) and gets TCP back-pressure, until WriteTimeout closes
// the connection and releases everything. A handler that waits for
// something only this connection's reader can deliver (a response to its
// own Invoke) must not be used with a budget that can fill.
//
// Inbound frames may also be claimed from a budget shared beyond the
// connection (ServerConfig.FrameBudget, the broker's request budget): the
// reader claims a frame's bytes once its length has arrived, before it
// takes a buffer, waits (reading nothing) while they do not fit, and gives
// them back once the frame is decoded. Not later: a handler may wait for
// a response from its peer, itself a frame that must be claimed.
//
// A request's Body aliases the buffer its frame was read into. That buffer
// is the command's for good, unless the handler is a BodyBorrower that
// borrows the request's code: then the connection gives the buffer to a
// size-classed pool once the handler has returned and its response is
// queued, and a later frame overwrites it (see framepool.go; tests poison
// released buffers to catch a use after release).
//
// A Command handed to a write method (WriteResponse, Invoke, InvokeAsync,
// InvokeOneway) belongs to the connection from then on: its Body and
// BodyParts are written without copying and must not be modified. A sender
// that lends pooled buffers sets OnWritten: the connection calls it exactly
// once, after the frame's bytes were handed to the socket or when the frame
// is dropped (connection closed with the frame still queued, encode error,
// oversized frame, response to a oneway request). When a connection ends, its run
// goroutine releases every frame left in the write queue; senders that
// queue a frame with OnWritten take sendMu's read side so that none can
// slip in after that final drain.
package remoting
