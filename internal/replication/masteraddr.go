package replication

import (
	"context"
	"errors"
	"sync"
)

// The master's HA address: SlaveConfig.MasterAddr (haMasterAddress), or,
// when that is empty, what the NameServers answer the slave's
// registration (RocketMQ's REGISTER_BROKER reply carries the master's
// haServerAddr), passed in with SetMasterAddr. A slave without an address
// waits for one; a new address ends the session with the old master and
// the slave follows the new one at once.

// masterAddr is a Slave's current master address.
type masterAddr struct {
	mu      sync.Mutex
	addr    string
	changed chan struct{} // closed (and replaced) when addr changes
	cancel  context.CancelFunc
}

// SetMasterAddr sets the master's HA address (host:port). An address
// other than the current one ends the session with the current master;
// the slave then connects to the new one. An empty addr is ignored.
func (s *Slave) SetMasterAddr(addr string) {
	if addr == "" {
		return
	}
	a := &s.master
	a.mu.Lock()
	defer a.mu.Unlock()
	if addr == a.addr {
		return
	}
	if a.addr != "" {
		s.log.Warn("replication: the master's HA address changed", "from", a.addr, "to", addr)
	} else {
		s.log.Info("replication: the master's HA address", "addr", addr)
	}
	a.addr = addr
	if a.changed != nil {
		close(a.changed)
	}
	a.changed = make(chan struct{})
	if a.cancel != nil {
		a.cancel()
	}
}

// MasterAddr returns the master's HA address the slave follows ("" while
// it knows none).
func (s *Slave) MasterAddr() string {
	s.master.mu.Lock()
	defer s.master.mu.Unlock()
	return s.master.addr
}

// sessionAddr waits until a master address is known and returns it with a
// context for the session, ended when the address changes.
func (s *Slave) sessionAddr(ctx context.Context) (string, context.Context, context.CancelFunc, error) {
	a := &s.master
	for {
		a.mu.Lock()
		if a.changed == nil {
			a.changed = make(chan struct{})
		}
		addr, changed := a.addr, a.changed
		if addr != "" {
			sctx, cancel := context.WithCancel(ctx)
			a.cancel = cancel
			a.mu.Unlock()
			return addr, sctx, cancel, nil
		}
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", nil, nil, ctx.Err()
		case <-changed:
		}
	}
}

// errMasterChanged ends a session whose master address changed.
var errMasterChanged = errors.New("replication: the master's address changed")

// sessionErr is a session's outcome: errMasterChanged if it ended because
// the address changed (not ctx).
func (s *Slave) sessionErr(ctx, sctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && sctx.Err() != nil && !errors.Is(err, ErrDiverged) && !errors.Is(err, errFatal) {
		return errMasterChanged
	}
	return err
}
