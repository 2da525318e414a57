package core

import (
	"context"
	"testing"

	"github.com/keelmq/keel/internal/store/record"
)

// TestKafkaTxnRecordsReachTheSlave: a system record of the Kafka door's
// transaction coordinator passes through the slave's core (nothing of
// the core's to apply; it does not stop the dispatcher), the changes
// after it are applied, and the slave's log holds it for the door a
// promotion starts (store.ScanSystem).
func TestKafkaTxnRecordsReachTheSlave(t *testing.T) {
	p := startCorePair(t)
	defer p.close()
	rec, err := record.AppendSystemRecord(nil, &record.SystemRecord{Kind: record.KindKafkaTxn, Payload: []byte(`{"e":{"id":"tx"}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := p.mst.AppendRecord(context.Background(), rec); !r.OK() {
		t.Fatalf("append: %v %v", r.Status, r.Err)
	}
	if _, err := p.master.EnsureTopic("after-txn", 4, PermRW); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the topic created after the transaction record on the slave", func() bool {
		_, ok := p.slave.Topic("after-txn")
		return ok
	})
	if err := p.sst.Err(); err != nil {
		t.Fatalf("the slave's store stopped: %v", err)
	}
	var payloads []string
	if _, err := p.sst.ScanSystem(0, func(_, _ int64, body []byte) error {
		r, err := record.DecodeSystem(body)
		if err == nil && r.Kind == record.KindKafkaTxn {
			payloads = append(payloads, string(r.Payload))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(payloads) != 1 || payloads[0] != `{"e":{"id":"tx"}}` {
		t.Fatalf("the slave's log holds %q", payloads)
	}
}
