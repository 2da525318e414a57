package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMetadataByTopicID: Metadata v10+ asked for a topic by its id (as
// clients do to name the topics an OffsetFetch v10 answer gives by id)
// answers that topic with its name; an id no topic has is
// UNKNOWN_TOPIC_ID.
func TestMetadataByTopicID(t *testing.T) {
	n := startNode(t, nil)
	createLocalTopic(t, n, "by-id", 2)
	req := kmsg.NewPtrMetadataRequest()
	for _, id := range [][16]byte{topicID("by-id"), topicID("no-such-topic")} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.TopicID = id
		req.Topics = append(req.Topics, rt)
	}
	resp := dialRaw(t, n.addr).do(req, 12).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 2 {
		t.Fatalf("%d topics answered, want 2: %+v", len(resp.Topics), resp.Topics)
	}
	if got := resp.Topics[0]; got.ErrorCode != errNone || got.Topic == nil || *got.Topic != "by-id" || got.TopicID != topicID("by-id") || len(got.Partitions) != 2 {
		t.Errorf("the topic asked by id: %+v", got)
	}
	if got := resp.Topics[1]; got.ErrorCode != errUnknownTopicID || got.TopicID != topicID("no-such-topic") {
		t.Errorf("an unknown id: %+v", got)
	}
}
