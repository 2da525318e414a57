package kafka

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestConsumerOffsetsIsNotATopic: as docs/kafka.md says, Kafka's
// __consumer_offsets is not a topic here: a full Metadata and kadm's
// ListTopics do not list it, a Metadata naming it (with auto-creation
// allowed) and CreateTopics are answered INVALID_TOPIC_EXCEPTION and
// create nothing, and a committed offset is read with OffsetFetch.
func TestConsumerOffsetsIsNotATopic(t *testing.T) {
	n := startNode(t, nil)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	produceAll(t, cl, "orders", 0, 3, "v")
	var os kadm.Offsets
	os.AddOffset("orders", 0, 2, -1)
	if rs, err := adm.CommitOffsets(ctx, "billing", os); err != nil || rs.Error() != nil {
		t.Fatal(err, rs.Error())
	}

	req := kmsg.NewPtrMetadataRequest()
	name := consumerOffsetsTopic
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &name
	req.Topics, req.AllowAutoTopicCreation = []kmsg.MetadataRequestTopic{rt}, true
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != errInvalidTopic || len(resp.Topics[0].Partitions) != 0 {
		t.Fatalf("metadata of %s: %+v", name, resp.Topics)
	}
	if _, ok := n.core.Topic(name); ok {
		t.Fatalf("a Metadata request created %s", name)
	}
	req.AllowAutoTopicCreation = false
	if resp, err = req.RequestWith(ctx, cl); err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != errUnknownTopicOrPartition {
		t.Fatalf("metadata of %s without auto-creation: %v %+v", name, err, resp)
	}
	cr, err := adm.CreateTopic(ctx, 1, 1, nil, name)
	if !errors.Is(err, kerr.InvalidTopicException) && !errors.Is(cr.Err, kerr.InvalidTopicException) {
		t.Fatalf("create %s: %v %+v", name, err, cr)
	}
	if _, ok := n.core.Topic(name); ok {
		t.Fatalf("CreateTopics created %s", name)
	}

	all, err := adm.ListTopicsWithInternal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, listed := all[name]; listed || !all.Has("orders") {
		t.Fatalf("ListTopics: %v", all.Names())
	}
	full := kmsg.NewPtrMetadataRequest() // null topics: all
	if resp, err = full.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		if rt.Topic != nil && *rt.Topic == name || rt.IsInternal {
			t.Fatalf("a full Metadata lists %+v", rt)
		}
	}

	got, err := adm.FetchOffsets(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := got.Lookup("orders", 0); !ok || o.At != 2 {
		t.Fatalf("committed offset read back %+v %v", o, ok)
	}
}
