// Package amqpinfo describes AMQP queues and exchanges as every part of
// Keel reports them: the AMQP front door takes the snapshots, the RocketMQ
// front door sends them as the JSON body of Keel's LIST_AMQP request, and
// the admin client (`keel amqp`, the console) reads that body; the AMQP
// management API (internal/amqpmgmt) serves them with the connections,
// channels, consumers and bindings described here too. One
// definition of the shape, so the writer and the readers cannot drift
// apart. Standard library only: it knows no protocol, store or broker.
package amqpinfo

// Queue is a snapshot of one AMQP queue. Counters count since the broker
// started.
type Queue struct {
	Vhost      string `json:"vhost"`
	Name       string `json:"name"`
	Topic      string `json:"topic"` // the store topic holding its messages
	Type       string `json:"type"`  // classic or quorum
	Durable    bool   `json:"durable"`
	Exclusive  bool   `json:"exclusive"`
	AutoDelete bool   `json:"autoDelete"`
	// Arguments acted on (-1: not set).
	MessageTTLMs       int64  `json:"messageTtlMs"`
	MaxLength          int64  `json:"maxLength"`
	DeliveryLimit      int64  `json:"deliveryLimit"`
	DeadLetterExchange string `json:"deadLetterExchange,omitempty"`

	Ready     int64 `json:"ready"`     // messages waiting to be delivered
	Unacked   int64 `json:"unacked"`   // delivered, not yet settled
	Consumers int   `json:"consumers"` // basic.consume subscriptions
	// OldestUnsettledAgeMs is how long ago the store wrote the oldest
	// message not yet settled (it holds retention: docs/amqp.md); -1 if
	// every message is settled.
	OldestUnsettledAgeMs int64 `json:"oldestUnsettledAgeMs"`

	Published    uint64 `json:"published"`
	Delivered    uint64 `json:"delivered"`
	Redelivered  uint64 `json:"redelivered"`
	Acked        uint64 `json:"acked"`
	DeadLettered uint64 `json:"deadLettered"`
	Dropped      uint64 `json:"dropped"`
	Refused      uint64 `json:"refused"`
}

// Exchange is a snapshot of one AMQP exchange.
type Exchange struct {
	Vhost      string `json:"vhost"`
	Name       string `json:"name"`
	Type       string `json:"type"`
	Durable    bool   `json:"durable"`
	AutoDelete bool   `json:"autoDelete"`
	Internal   bool   `json:"internal"`
	Bindings   int    `json:"bindings"`
}

// Connection is one open AMQP client connection.
type Connection struct {
	Remote   string `json:"remote"`
	User     string `json:"user,omitempty"`  // empty until connection.start-ok
	Vhost    string `json:"vhost,omitempty"` // empty until connection.open
	Channels int    `json:"channels"`
	SinceMs  int64  `json:"sinceMs"` // Unix ms it was accepted
}
