package broker

import "github.com/keelmq/keel/internal/store/record"

// onlyRocketMQ drops from recs, in place, the records that are not
// RocketMQ messages (a Kafka batch or an AMQP message in the same queue):
// a RocketMQ client would take their bytes for a message and fail to
// decode the whole pull. Converting them for RocketMQ consumers is not
// done yet; their entries are skipped (the pull's next offset is past
// them) — docs/kafka.md. The dropped records stay in the result's buffers
// until it is released.
func onlyRocketMQ(recs [][]byte) [][]byte {
	out := recs[:0]
	for _, r := range recs {
		if t, err := record.TypeOf(r); err == nil && t == record.RocketMQ {
			out = append(out, r)
		}
	}
	clear(recs[len(out):])
	return out
}
