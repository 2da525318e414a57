package amqp

// Connections: the open client connections, for the operator's tools (the
// broker's LIST_AMQP, `keel amqp connections`, the console).

import (
	"sort"

	"github.com/keelmq/keel/internal/amqpinfo"
)

// Connections returns a snapshot of the open connections, by address.
func (s *Server) Connections() []amqpinfo.Connection {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	out := make([]amqpinfo.Connection, 0, len(conns))
	for _, c := range conns {
		ci := amqpinfo.Connection{Remote: c.nc.RemoteAddr().String(), SinceMs: c.since.UnixMilli()}
		c.infoMu.Lock()
		ci.User, ci.Vhost = c.infoUser, c.infoVhost
		c.infoMu.Unlock()
		c.chMu.Lock()
		ci.Channels = len(c.channels)
		c.chMu.Unlock()
		out = append(out, ci)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Remote < out[j].Remote })
	return out
}
