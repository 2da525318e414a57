package bench

import (
	"errors"
	"fmt"
	"math"
)

// batchItemOverheadBytes is the per-message overhead of a batch body
// without properties (TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLEN, PROPLEN).
const batchItemOverheadBytes = 22

// Validate checks the workload. Names in errors are the file keys.
func (w *Workload) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidWorkload}, args...)...))
	}
	w.validateMode(bad)
	w.validateShape(bad)
	w.validateProducers(bad)
	w.validateConsumers(bad)
	w.validateTiming(bad)
	w.validateTargets(bad)
	return errors.Join(errs...)
}

type complaint func(format string, args ...any)

func (w *Workload) validateMode(bad complaint) {
	switch w.Mode {
	case ModeProduce, ModeConsume, ModeProduceConsume, ModeBacklog, ModeMaxRate:
	default:
		bad("mode %q: want produce, consume, produce-consume, backlog or max-rate", w.Mode)
	}
	switch w.FlushDiskType {
	case "", "SYNC_FLUSH", "ASYNC_FLUSH":
	default:
		bad("flushDiskType %q: want SYNC_FLUSH or ASYNC_FLUSH", w.FlushDiskType)
	}
}

func (w *Workload) validateShape(bad complaint) {
	if w.Topics < 1 || w.Topics > MaxTopics {
		bad("topics %d: want 1..%d", w.Topics, MaxTopics)
	}
	if w.QueuesPerTopic < 1 || w.QueuesPerTopic > MaxQueues {
		bad("queuesPerTopic %d: want 1..%d", w.QueuesPerTopic, MaxQueues)
	}
	if w.MessageSize < MinMessageSize || w.MessageSize > MaxMessageSize {
		bad("messageSize %d: want %d..%d bytes (the body carries a 16-byte stamp)", w.MessageSize, MinMessageSize, MaxMessageSize)
	}
}

// hasProducers reports whether the mode sends.
func (w *Workload) hasProducers() bool { return w.Mode != ModeConsume }

// hasConsumers reports whether the mode pulls.
func (w *Workload) hasConsumers() bool { return w.Mode != ModeProduce }

func (w *Workload) validateProducers(bad complaint) {
	if !w.hasProducers() {
		return
	}
	if w.Producers < 1 || w.Producers > MaxProducers {
		bad("producers %d: want 1..%d", w.Producers, MaxProducers)
	}
	if w.ProducerRate < 0 || math.IsNaN(w.ProducerRate) || math.IsInf(w.ProducerRate, 0) {
		bad("producerRate %v: want msg/s >= 0 (0 or max: unpaced)", w.ProducerRate)
	}
	if w.InflightPerProducer < 1 || w.InflightPerProducer > MaxInflight {
		bad("inflightPerProducer %d: want 1..%d", w.InflightPerProducer, MaxInflight)
	}
	if w.SyncSenders != 0 {
		if w.InflightPerProducer != 1 {
			bad("syncSenders and inflightPerProducer exclude each other (sync senders have one request each in flight)")
		}
		if w.SyncSenders < w.Producers || w.SyncSenders > w.Producers*MaxInflight {
			bad("syncSenders %d: want producers (%d) .. producers*%d", w.SyncSenders, w.Producers, MaxInflight)
		}
	}
	if w.BatchSize < 1 || w.BatchSize > MaxBatchSize {
		bad("batchSize %d: want 1..%d", w.BatchSize, MaxBatchSize)
	} else if w.BatchSize > 1 && w.BatchSize*(w.MessageSize+batchItemOverheadBytes) > MaxBatchBytes {
		bad("batchSize %d x messageSize %d: a batch body must stay within %d bytes", w.BatchSize, w.MessageSize, MaxBatchBytes)
	}
}

func (w *Workload) validateConsumers(bad complaint) {
	if !w.hasConsumers() {
		if w.Consumers != 0 {
			bad("consumers %d in mode produce: use mode produce-consume", w.Consumers)
		}
		return
	}
	queues := w.Topics * w.QueuesPerTopic
	if w.Consumers < 1 || w.Consumers > queues {
		bad("consumers %d: want 1..%d (topics x queuesPerTopic; a queue has one consumer)", w.Consumers, queues)
	}
	if w.PullBatchSize < 1 || w.PullBatchSize > MaxPullBatch {
		bad("pullBatchSize %d: want 1..%d", w.PullBatchSize, MaxPullBatch)
	}
}

func (w *Workload) validateTiming(bad complaint) {
	if w.Duration <= 0 {
		bad("duration %v: want > 0", w.Duration)
	}
	if w.Warmup < 0 {
		bad("warmup %v: want >= 0", w.Warmup)
	}
	if (w.Mode == ModeBacklog) != (w.BacklogBytes > 0) {
		bad("backlogBytes %d: want > 0 exactly in mode backlog", w.BacklogBytes)
	}
	if w.RateOfMax < 0 || w.RateOfMax > 1 || math.IsNaN(w.RateOfMax) {
		bad("rateOfMax %v: want 0 < f <= 1", w.RateOfMax)
	}
	if w.RateOfMax > 0 && (w.Mode != ModeProduceConsume || w.ProducerRate != 0) {
		bad("rateOfMax needs mode produce-consume and no producerRate")
	}
	if w.Mode == ModeMaxRate || w.RateOfMax > 0 {
		if w.SearchStartRate <= 0 || w.SearchStepFactor <= 1 || w.SearchStepDuration <= 0 || w.SearchP99Limit <= 0 {
			bad("max-rate search: want searchStartRate > 0, searchStepFactor > 1, searchStepDuration > 0, searchP99Limit > 0")
		}
		if w.Mode == ModeMaxRate && w.ProducerRate != 0 {
			bad("producerRate %v in mode max-rate: the search sets the rate", w.ProducerRate)
		}
	}
}

func (w *Workload) validateTargets(bad complaint) {
	t := w.Targets
	for _, f := range []float64{t.MsgsPerSec, t.MBPerSec, t.SeqWriteRatio, t.Sync1MiBRatio, t.P99Sync4KiBFactor} {
		if f < 0 || math.IsNaN(f) {
			bad("targets must be >= 0")
			return
		}
	}
	if t.P50 < 0 || t.P99 < 0 || t.P999 < 0 {
		bad("latency targets must be >= 0")
	}
}
