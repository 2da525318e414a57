package replication

import (
	"context"
	"sync/atomic"
	"time"
)

// Pacing: the master sends a replica at most MaxInFlightBytes beyond what
// the replica acknowledged receiving (its acks' written end), so a replica
// far behind (a new one, or one back after a long absence) catches up at
// the pace it writes: the master holds one chunk per replica, the
// replica one frame, and the master's reads of old segments, which come
// from the disk, go no faster than the replica takes them. A link that
// delivers nothing for the idle timeout is dropped as before (the ack
// reader's deadline), so a stalled replica never holds a sender forever.

// DefaultMaxInFlightBytes is MasterConfig.MaxInFlightBytes's default.
const DefaultMaxInFlightBytes = 4 << 20

// pace is a follower's flow control.
type pace struct {
	recv     atomic.Int64  // what the replica acknowledged receiving
	maxAhead atomic.Int64  // the most ever sent beyond recv (tests check the bound)
	kick     chan struct{} // an ack arrived
	last     atomic.Int64  // end of the bytes sent
}

func (p *pace) init(from int64) {
	p.recv.Store(from)
	p.last.Store(from)
	p.kick = make(chan struct{}, 1)
}

// received notes an ack of the replica's written end.
func (p *pace) received(written int64) {
	for {
		cur := p.recv.Load()
		if written <= cur || p.recv.CompareAndSwap(cur, written) {
			break
		}
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// sent notes bytes sent up to end.
func (p *pace) sent(end int64) {
	p.last.Store(end)
	if ahead := end - p.recv.Load(); ahead > p.maxAhead.Load() {
		p.maxAhead.Store(ahead)
	}
}

// inFlight is what was sent and not acknowledged as received.
func (p *pace) inFlight() int64 { return p.last.Load() - p.recv.Load() }

// waitCredit waits until f may be sent another chunk: at most
// MaxInFlightBytes minus a chunk are in flight, so a chunk never takes it
// past the bound (a record larger than a chunk, sent whole, can; nothing
// in flight always may send). It returns false after a heartbeat
// interval without room: the caller sends a heartbeat, then asks again.
func (m *Master) waitCredit(ctx context.Context, f *follower) (bool, error) {
	limit := int64(m.cfg.MaxInFlightBytes - m.cfg.ChunkBytes)
	var timeout <-chan time.Time
	for {
		if n := f.pace.inFlight(); n <= 0 || n <= limit {
			return true, nil
		}
		if timeout == nil {
			t := time.NewTimer(m.cfg.HeartbeatInterval)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-f.pace.kick:
		case <-timeout:
			return false, nil
		}
	}
}
