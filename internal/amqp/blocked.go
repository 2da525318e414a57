package amqp

import "github.com/keelmq/keel/internal/amqp/wire"

// connection.blocked. While the store refuses writes because the disk is
// above its hard limit (store.Stats.DiskFull: diskHardLimitRatio, or the
// reserve of free space), every open connection whose client announced
// the connection.blocked capability gets connection.blocked, and
// connection.unblocked once writes are accepted again; the state is
// looked at every expirySweepInterval. Publishes meanwhile are not held
// back: the store refuses them and publisher confirms nack them (RabbitMQ
// instead stops reading from publishing connections).

// blockedReason is connection.blocked's reason.
const blockedReason = "low on disk space: the store refuses writes (diskSpaceWarningLevelRatio, or the free-space reserve on a small disk)"

// checkBlocked sends connection.blocked or unblocked when the store's
// disk-full state changed.
func (s *Server) checkBlocked() {
	full := s.store.Stats().DiskFull
	if s.blocked.Swap(full) == full {
		return
	}
	if full {
		s.log.Warn("amqp: the store refuses writes (disk full): clients are sent connection.blocked")
	} else {
		s.log.Info("amqp: the store accepts writes again: clients are sent connection.unblocked")
	}
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if c.wantsBlocked.Load() {
			c.syncBlocked()
		}
	}
}

// syncBlocked tells a client that takes connection.blocked the store's
// current state if the last method it was sent says otherwise. Both the
// sweep and the connection's handshake call it; the state is read under
// the connection's lock, so whichever runs last sends what is true now
// (reading it before the lock, a handshake could send a blocked it read
// before the sweep's unblocked, after it).
func (c *conn) syncBlocked() {
	c.blockMu.Lock()
	defer c.blockMu.Unlock()
	full := c.srv.blocked.Load()
	if full == c.blockedSent {
		return
	}
	c.blockedSent = full
	if full {
		c.send(0, &wire.ConnectionBlocked{Reason: blockedReason})
	} else {
		c.send(0, &wire.ConnectionUnblocked{})
	}
}
