package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// pollInterval is how often a phase checks its end condition.
const pollInterval = 10 * time.Millisecond

// phase runs a measured phase: warmup (not measured), then until dur has
// passed or done reports true, printing progress lines. It returns the
// send and receive throughput of the measured part. from, if not nil, is
// where the phase starts (a snapshot taken before its work began).
func (r *runner) phase(ctx context.Context, name string, warmup, dur time.Duration, done func() bool, from *snapshot) (send, recv Throughput, err error) {
	sending, receiving := r.prodStop != nil, r.consStop != nil
	last := r.st.snapshot()
	if from != nil {
		last = *from
	}
	t0, base := last.at, last
	measuring := warmup <= 0
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			err = fmt.Errorf("%w: %w", errStopped, ctx.Err())
		case <-ticker.C:
		}
		now := time.Now()
		if !measuring && now.Sub(t0) >= warmup {
			measuring, base = true, r.st.snapshot()
		}
		finished := err != nil || (measuring && (now.Sub(base.at) >= dur || (done != nil && done())))
		if now.Sub(last.at) >= r.opt.ProgressInterval || finished {
			s := r.st.snapshot()
			if r.opt.Progress != nil && s.at.Sub(last.at) >= r.opt.ProgressInterval/2 {
				label := name
				if !measuring {
					label = "warmup"
				}
				ps, pr := window(last, s)
				fmt.Fprintln(r.opt.Progress, progressLine(time.Since(r.start), label, ps, pr, sending, receiving))
			}
			last = s
		}
		if finished {
			if !measuring {
				base = last
			}
			send, recv = window(base, last)
			return send, recv, err
		}
	}
}

func (r *runner) runProduce(ctx context.Context, res *Result) error {
	r.startProducers(r.w.ProducerRate)
	send, _, err := r.phase(ctx, "produce", r.w.Warmup, r.w.Duration, nil, nil)
	res.Send = &send
	return err
}

func (r *runner) runConsume(ctx context.Context, res *Result) error {
	if err := r.startConsumers(ctx, r.offsetOf(ctx, remoting.ReqGetMinOffset), nil); err != nil {
		return err
	}
	_, recv, err := r.phase(ctx, "consume", r.w.Warmup, r.w.Duration, nil, nil)
	res.Receive = &recv
	return err
}

// runProduceConsume starts the consumers at the queues' ends, then the
// producers; after the measured window the producers stop and the
// consumers get DrainTimeout to receive everything acknowledged.
func (r *runner) runProduceConsume(ctx context.Context, res *Result) error {
	if err := r.startConsumers(ctx, r.offsetOf(ctx, remoting.ReqGetMaxOffset), nil); err != nil {
		return err
	}
	rate := r.w.ProducerRate
	if r.w.RateOfMax > 0 {
		r.startProducers(r.w.SearchStartRate)
		if err := r.search(ctx, res); err != nil {
			return err
		}
		if res.MaxRate <= 0 {
			return fmt.Errorf("bench: the max-rate search found no sustainable rate (start %v msg/s)", r.w.SearchStartRate)
		}
		rate = res.MaxRate * r.w.RateOfMax
		res.PacedRate = rate
		r.setRate(rate)
	} else {
		r.startProducers(rate)
	}
	send, recv, err := r.phase(ctx, "run", r.w.Warmup, r.w.Duration, nil, nil)
	res.Send, res.Receive = &send, &recv
	if err != nil {
		return err
	}
	r.stopProducers()
	return r.drain(ctx)
}

// drain waits until the consumers have received every acknowledged
// message, or DrainTimeout.
func (r *runner) drain(ctx context.Context) error {
	deadline := time.Now().Add(r.opt.DrainTimeout)
	for r.st.received.Load() < r.st.sent.Load() {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: consumers received %d of %d acknowledged messages within %v",
				r.st.received.Load(), r.st.sent.Load(), r.opt.DrainTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errStopped, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
	return nil
}

// runBacklog fills BacklogBytes at full speed, then drains every queue
// from its minimum offset up to its offset before the fill plus what the
// fill acknowledged there (so records acknowledged but not yet dispatched
// are waited for, not missed). Duration bounds each of the two phases.
func (r *runner) runBacklog(ctx context.Context, res *Result) error {
	maxOffset := r.offsetOf(ctx, remoting.ReqGetMaxOffset)
	before := make(map[MessageQueue]int64, len(r.read))
	for _, q := range r.read {
		off, err := maxOffset(q)
		if err != nil {
			return err
		}
		before[q] = off
	}
	r.startProducers(0)
	target := uint64(r.w.BacklogBytes)
	filled := func() bool { return r.st.sentBytes.Load() >= target }
	fill, _, err := r.phase(ctx, "fill", 0, r.w.Duration, filled, nil)
	r.stopProducers()
	res.Send = &fill
	if err == nil && !filled() {
		err = fmt.Errorf("bench: the fill did not reach %d bytes within duration %v", target, r.w.Duration)
	}
	if err != nil {
		return err
	}
	end := func(q MessageQueue) (int64, error) { return before[q] + int64(r.acked[q].Load()), nil }
	start := r.st.snapshot()
	if err := r.startConsumers(ctx, r.offsetOf(ctx, remoting.ReqGetMinOffset), end); err != nil {
		return err
	}
	drained := func() bool { return r.consDone.Load() == int64(len(r.consumers)) }
	_, recv, err := r.phase(ctx, "drain", 0, r.w.Duration, drained, &start)
	res.Receive = &recv
	if err == nil && !drained() {
		err = fmt.Errorf("bench: the drain did not finish within duration %v", r.w.Duration)
	}
	return err
}

// Max-rate search limits.
const (
	maxSearchSteps = 40
	minSearchRate  = 50 // msg/s: the search gives up below
	// searchRateSlack: a step holds if the producers reached this share of
	// the target rate.
	searchRateSlack = 0.95
	// searchMaxLag: a step fails if the consumers are more than this much
	// of the target rate's messages behind at its end.
	searchMaxLag = 500 * time.Millisecond
)

func (r *runner) runMaxRate(ctx context.Context, res *Result) error {
	if err := r.startConsumers(ctx, r.offsetOf(ctx, remoting.ReqGetMaxOffset), nil); err != nil {
		return err
	}
	r.startProducers(r.w.SearchStartRate)
	return r.search(ctx, res)
}

// search raises the producers' rate by SearchStepFactor every
// SearchStepDuration, starting at SearchStartRate after a warm-up, until a
// step does not hold: the producers fall short of the target, a send
// fails, the consumers fall behind or the end-to-end p99 passes
// SearchP99Limit. If the first rate already fails, the search halves it
// (down to minSearchRate) until one holds, then raises it from there. res
// gets every step, MaxRate (the last target that held) and that step's
// throughput.
func (r *runner) search(ctx context.Context, res *Result) error {
	if r.w.Warmup > 0 {
		if _, _, err := r.phase(ctx, "warmup", r.w.Warmup, 0, nil, nil); err != nil {
			return err
		}
	}
	rate := r.w.SearchStartRate
	for range maxSearchSteps {
		r.setRate(rate)
		send, recv, err := r.phase(ctx, fmt.Sprintf("%.0f/s", rate), 0, r.w.SearchStepDuration, nil, nil)
		if err != nil {
			return err
		}
		step := r.judgeStep(rate, send, recv)
		res.SearchSteps = append(res.SearchSteps, step)
		switch {
		case step.OK:
			res.MaxRate, res.Send, res.Receive = rate, &send, &recv
			rate *= r.w.SearchStepFactor
		case res.MaxRate == 0 && rate/2 >= minSearchRate:
			rate /= 2
			r.setRate(rate)
			if err := r.settle(ctx, rate); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	return nil
}

// settle waits, up to DrainTimeout, until the consumers are within
// searchMaxLag of the producers at rate, so a failed step's backlog does
// not fail the next one.
func (r *runner) settle(ctx context.Context, rate float64) error {
	deadline := time.Now().Add(r.opt.DrainTimeout)
	for time.Now().Before(deadline) {
		if sent, recv := r.st.sent.Load(), r.st.received.Load(); sent <= recv || float64(sent-recv) <= rate*searchMaxLag.Seconds() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errStopped, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
	return nil
}

func (r *runner) judgeStep(rate float64, send, recv Throughput) SearchStep {
	sent, received := r.st.sent.Load(), r.st.received.Load()
	step := SearchStep{TargetRate: rate, SendRate: send.MsgsPerSec, RecvRate: recv.MsgsPerSec,
		E2EP99: float64(recv.Latency.P99) / 1e6, Errors: send.Errors + recv.Errors, OK: true}
	if sent > received {
		step.Lag = sent - received
	}
	switch {
	case send.MsgsPerSec < searchRateSlack*rate:
		step.OK, step.Why = false, fmt.Sprintf("producers reached %.0f msg/s", send.MsgsPerSec)
	case step.Errors > 0:
		step.OK, step.Why = false, fmt.Sprintf("%d errors", step.Errors)
	case float64(step.Lag) > rate*searchMaxLag.Seconds():
		step.OK, step.Why = false, fmt.Sprintf("consumers %d messages behind", step.Lag)
	case recv.Latency.P99 > r.w.SearchP99Limit:
		step.OK, step.Why = false, fmt.Sprintf("end-to-end p99 %s > %s", fmtDur(recv.Latency.P99), fmtDur(r.w.SearchP99Limit))
	}
	return step
}
