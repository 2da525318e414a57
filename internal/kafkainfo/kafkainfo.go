// Package kafkainfo describes the Kafka front door's consumer groups and
// connections as every part of Keel reports them: the Kafka door takes
// the snapshot, the RocketMQ front door sends it as the JSON body of
// Keel's LIST_KAFKA request, and the admin client (`keel kafka`, the
// console) reads that body; the RocketMQ door also counts a Kafka group's
// members in GET_CONSUMER_CONNECTION_LIST (through broker.KafkaHooks).
// One definition of the shape, so the writer and the readers cannot drift
// apart. Standard library only: it knows no
// protocol, store or broker.
package kafkainfo

// Info is a snapshot of the Kafka door.
type Info struct {
	Groups      []Group      `json:"groups"`
	Connections []Connection `json:"connections"`
}

// Group is a consumer group the door coordinates (in memory since the
// broker started; its committed offsets live in the broker's offset table).
type Group struct {
	Name string `json:"group"`
	// State is Kafka's: Empty, PreparingRebalance, CompletingRebalance,
	// Stable.
	State        string   `json:"state"`
	ProtocolType string   `json:"protocolType"` // "consumer" for consumer groups
	Protocol     string   `json:"protocol"`     // the assignor (range, cooperative-sticky, ...)
	Generation   int32    `json:"generation"`
	Leader       string   `json:"leader,omitempty"`
	Members      []Member `json:"members"`
}

// Member is one group member.
type Member struct {
	MemberID string `json:"memberId"`
	ClientID string `json:"clientId"`
	Host     string `json:"host"`
	// Assignment is what the leader assigned it (decoded for the
	// "consumer" protocol; empty before the group is stable).
	Assignment []Assignment `json:"assignment"`
}

// Assignment is a member's partitions of one topic.
type Assignment struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"`
}

// Connection is one open Kafka client connection.
type Connection struct {
	Remote   string `json:"remote"`
	ClientID string `json:"clientId,omitempty"` // of its last request
	User     string `json:"user,omitempty"`     // SASL account, when authenticated
	SinceMs  int64  `json:"sinceMs"`            // Unix ms it was accepted
	Requests int64  `json:"requests"`
}
