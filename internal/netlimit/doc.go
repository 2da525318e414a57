// Package netlimit bounds what the network can make the broker hold: the
// bytes of requests being read and decoded (a Budget shared by every front
// door, as Kafka's queued.max.request.bytes), and the connections each
// listener keeps open (a Listener with a total and a per-source-address
// limit, which also keeps accepting after EMFILE).
//
// Budget: a door asks for a request's bytes (Door.Acquire) as soon as its
// size is known and before it allocates a buffer for it; when the budget is
// spent the connection waits there, reading nothing more, so TCP pushes
// back on the client. A request whose decoded form needs more than its wire
// bytes asks for the difference (Claim.Grow) before decoding; growers are
// served before new requests, and when every holder is waiting to grow the
// first one is granted beyond the capacity (at most one request's growth),
// so the budget cannot deadlock. A small request (at most 1/64 of the
// capacity) that fits may pass larger ones waiting. Held bytes are returned with
// Claim.Release once the request has been served.
//
// Listener: Accept refuses (closes at once) a connection beyond
// Limits.MaxConns open connections of the listener or beyond
// Limits.MaxConnsPerAddr from one source address, counts it, and logs at
// most one line per LogInterval per listener saying how many it refused
// since. An accept error other than the listener's closing (EMFILE,
// ENFILE, ECONNABORTED) is retried after a pause that doubles from 5 ms to
// 1 s, so a descriptor shortage neither spins nor stops the listener.
//
// Concurrency: every method of Budget, Door, Claim and Listener is safe for
// concurrent use; a Claim belongs to one request and is used by one
// goroutine at a time. Standard library only. The remoting server and the
// AMQP door take the budget through a FrameBudget interface of their own,
// which Door satisfies, so they import nothing new; the Kafka door imports
// this package.
package netlimit
