package translate

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// RecompressKafkaBatch turns a batch of any codec into one of any other
// whose records read back the same, with a valid CRC, the codec bits
// changed and the rest of the header kept; decompressed data beyond the
// limit is refused.
func TestRecompressKafkaBatch(t *testing.T) {
	var recs []kmsg.Record
	for i := range 20 {
		recs = append(recs, kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: int64(i), Key: fmt.Appendf(nil, "k%d", i),
			Value: fmt.Appendf(nil, "value %d repeated repeated repeated repeated", i)})
	}
	codecs := []int{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd}
	for _, from := range codecs {
		in := kafkaBatch(t, from, 7, 1000, recs)
		for _, to := range codecs {
			out, err := RecompressKafkaBatch(in, to, DefaultLimit)
			if err != nil {
				t.Fatalf("%s to %s: %v", codecName(from), codecName(to), err)
			}
			h, err := parseKafkaHeader(out) // checks the CRC and the length
			if err != nil {
				t.Fatalf("%s to %s: %v", codecName(from), codecName(to), err)
			}
			if KafkaBatchCodec(out) != to || h.baseOffset != 7 || h.count != 20 || h.firstTimestamp != 1000 {
				t.Fatalf("%s to %s: header %+v", codecName(from), codecName(to), h)
			}
			i := 0
			err = EachKafkaRecord(out, DefaultLimit, func(r *KafkaRecord) error {
				if r.Offset != int64(7+i) || string(r.Key) != string(recs[i].Key) || string(r.Value) != string(recs[i].Value) || r.Timestamp != int64(1000+i) {
					return fmt.Errorf("record %d: %+v", i, r)
				}
				i++
				return nil
			})
			if err != nil || i != 20 {
				t.Fatalf("%s to %s: %d records read back: %v", codecName(from), codecName(to), i, err)
			}
		}
	}
	if _, err := RecompressKafkaBatch(kafkaBatch(t, CodecGzip, 0, 0, recs), CodecNone, 100); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("beyond the limit: %v, want ErrTooLarge", err)
	}
}
