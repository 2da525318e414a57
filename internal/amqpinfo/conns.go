package amqpinfo

// ConnectionDetail is a snapshot of one open AMQP connection, as the management API shows it (one that finished
// its handshake).
type ConnectionDetail struct {
	// Name is RabbitMQ's name of a connection: "peer -> local".
	Name             string         `json:"name"`
	Vhost            string         `json:"vhost"`
	User             string         `json:"user"`
	AuthMechanism    string         `json:"authMechanism"`
	PeerHost         string         `json:"peerHost"`
	PeerPort         int            `json:"peerPort"`
	Host             string         `json:"host"` // the local end
	Port             int            `json:"port"`
	TLS              bool           `json:"tls"`
	Channels         int            `json:"channels"`
	FrameMax         uint32         `json:"frameMax"`
	ChannelMax       uint16         `json:"channelMax"`
	HeartbeatSeconds int            `json:"heartbeatSeconds"`
	ConnectedAtMs    int64          `json:"connectedAtMs"`
	ClientProperties map[string]any `json:"clientProperties,omitempty"` // as JSON values
}

// Channel is a snapshot of one open channel.
type Channel struct {
	Connection     string `json:"connection"` // Connection.Name
	Number         uint16 `json:"number"`
	Vhost          string `json:"vhost"`
	User           string `json:"user"`
	PeerHost       string `json:"peerHost"`
	PeerPort       int    `json:"peerPort"`
	Consumers      int    `json:"consumers"`
	Unacked        int    `json:"unacked"`        // deliveries awaiting their ack
	Prefetch       int    `json:"prefetch"`       // basic.qos for new consumers (0: none)
	GlobalPrefetch int    `json:"globalPrefetch"` // basic.qos global (0: none)
}

// Consumer is a snapshot of one basic.consume subscription.
type Consumer struct {
	Connection  string `json:"connection"` // Connection.Name
	Channel     uint16 `json:"channel"`
	Vhost       string `json:"vhost"`
	User        string `json:"user"`
	PeerHost    string `json:"peerHost"`
	PeerPort    int    `json:"peerPort"`
	Tag         string `json:"tag"`
	Queue       string `json:"queue"`
	AckRequired bool   `json:"ackRequired"`
	Prefetch    int    `json:"prefetch"` // 0: none
}

// Binding is one binding of an exchange to a queue or another exchange.
// The default exchange's implicit binding to every queue is not one.
type Binding struct {
	Vhost           string         `json:"vhost"`
	Source          string         `json:"source"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destinationType"` // queue or exchange
	RoutingKey      string         `json:"routingKey"`
	Arguments       map[string]any `json:"arguments,omitempty"`
}
