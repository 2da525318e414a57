package amqp

// What the management API (internal/amqpmgmt, wired by cmd/keel) reads of
// the door: snapshots of the open connections, their channels and
// consumers, the bindings and the vhosts, and the login check of its
// HTTP Basic credentials. Every snapshot copies under the locks it needs
// and holds none of them while it takes another.

import (
	"crypto/tls"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/amqpinfo"
)

// ConnectionInfo is a snapshot of one open connection.
type ConnectionInfo = amqpinfo.ConnectionDetail

// ChannelInfo is a snapshot of one open channel.
type ChannelInfo = amqpinfo.Channel

// ConsumerInfo is a snapshot of one consumer.
type ConsumerInfo = amqpinfo.Consumer

// BindingInfo is one binding.
type BindingInfo = amqpinfo.Binding

// connShown is what a connection shows once it is open: fixed then, and
// published at once (conn.shown) so that snapshots read it without the
// reader goroutine's fields.
type connShown struct {
	name, user, vhost, mechanism string
	peerHost, host               string
	peerPort, port               int
	tls                          bool
	frameMax                     uint32
	channelMax                   uint16
	heartbeat                    int
	at                           int64 // ms
	props                        map[string]any
}

// opened publishes what the connection shows, on the reader goroutine
// once connection.open chose its vhost.
func (c *conn) opened(so *wire.ConnectionStartOk) {
	peerHost, peerPort := hostPort(c.nc.RemoteAddr())
	host, port := hostPort(c.nc.LocalAddr())
	_, isTLS := c.nc.(*tls.Conn)
	c.shown.Store(&connShown{
		name: net.JoinHostPort(peerHost, strconv.Itoa(peerPort)) + " -> " + net.JoinHostPort(host, strconv.Itoa(port)),
		user: c.user, vhost: c.vh.name, mechanism: so.Mechanism, peerHost: peerHost, peerPort: peerPort,
		host: host, port: port, tls: isTLS, frameMax: c.frameMax, channelMax: c.channelMax,
		heartbeat: int(c.heartbeat.Seconds()), at: nowMs(), props: tableJSON(so.ClientProperties),
	})
}

func hostPort(a net.Addr) (string, int) {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String(), t.Port
	}
	h, p, _ := net.SplitHostPort(a.String())
	n, _ := strconv.Atoi(p)
	return h, n
}

// openConns returns the open connections with what they show, by name.
func (s *Server) openConns() ([]*conn, []*connShown) {
	s.mu.Lock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		if c.shown.Load() != nil {
			cs = append(cs, c)
		}
	}
	s.mu.Unlock()
	sort.Slice(cs, func(i, j int) bool { return cs[i].shown.Load().name < cs[j].shown.Load().name })
	shown := make([]*connShown, len(cs))
	for i, c := range cs {
		shown[i] = c.shown.Load()
	}
	return cs, shown
}

// channelList returns the connection's channels by number.
func (c *conn) channelList() []*channel {
	c.chMu.Lock()
	chs := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chs = append(chs, ch)
	}
	c.chMu.Unlock()
	slices.SortFunc(chs, func(a, b *channel) int { return int(a.id) - int(b.id) })
	return chs
}

// ConnectionDetails returns every open connection, by name, as the management API shows it.
func (s *Server) ConnectionDetails() []ConnectionInfo {
	cs, shown := s.openConns()
	out := make([]ConnectionInfo, len(cs))
	for i, c := range cs {
		sh := shown[i]
		c.chMu.Lock()
		n := len(c.channels)
		c.chMu.Unlock()
		out[i] = ConnectionInfo{Name: sh.name, Vhost: sh.vhost, User: sh.user, AuthMechanism: sh.mechanism,
			PeerHost: sh.peerHost, PeerPort: sh.peerPort, Host: sh.host, Port: sh.port, TLS: sh.tls, Channels: n,
			FrameMax: sh.frameMax, ChannelMax: sh.channelMax, HeartbeatSeconds: sh.heartbeat, ConnectedAtMs: sh.at,
			ClientProperties: sh.props}
	}
	return out
}

// Channels returns every channel of the open connections, by connection
// and number.
func (s *Server) Channels() []ChannelInfo {
	var out []ChannelInfo
	cs, shown := s.openConns()
	for i, c := range cs {
		sh := shown[i]
		for _, ch := range c.channelList() {
			ch.mu.Lock()
			out = append(out, ChannelInfo{Connection: sh.name, Number: ch.id, Vhost: sh.vhost, User: sh.user,
				PeerHost: sh.peerHost, PeerPort: sh.peerPort, Consumers: len(ch.consumers), Unacked: ch.unacked.len(),
				Prefetch: ch.prefetch, GlobalPrefetch: ch.globalPrefetch})
			ch.mu.Unlock()
		}
	}
	return out
}

// Consumers returns every consumer, by connection, channel and tag.
func (s *Server) Consumers() []ConsumerInfo {
	var out []ConsumerInfo
	cs, shown := s.openConns()
	for i, c := range cs {
		sh := shown[i]
		for _, ch := range c.channelList() {
			ch.mu.Lock()
			first := len(out)
			for _, k := range ch.consumers {
				out = append(out, ConsumerInfo{Connection: sh.name, Channel: ch.id, Vhost: sh.vhost, User: sh.user,
					PeerHost: sh.peerHost, PeerPort: sh.peerPort, Tag: k.tag, Queue: k.q.name, AckRequired: !k.noAck,
					Prefetch: k.prefetch})
			}
			ch.mu.Unlock()
			sort.Slice(out[first:], func(a, b int) bool { return out[first+a].Tag < out[first+b].Tag })
		}
	}
	return out
}

// Bindings returns every binding, by vhost, source exchange and the
// order they were made in. The default exchange's implicit bindings are
// not listed.
func (s *Server) Bindings() []BindingInfo {
	var out []BindingInfo
	for _, vname := range s.VhostNames() {
		v := s.vhosts[vname]
		v.mu.Lock()
		names := make([]string, 0, len(v.exchanges))
		for n := range v.exchanges {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			for _, b := range v.exchanges[n].bindings {
				i := BindingInfo{Vhost: vname, Source: n, Destination: b.Queue, DestinationType: "queue", RoutingKey: b.Key,
					Arguments: tableJSON(b.args)}
				if b.Exchange != "" {
					i.Destination, i.DestinationType = b.Exchange, "exchange"
				}
				out = append(out, i)
			}
		}
		v.mu.Unlock()
	}
	return out
}

// VhostNames returns the vhosts served, sorted.
func (s *Server) VhostNames() []string {
	names := make([]string, 0, len(s.vhosts))
	for n := range s.vhosts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ManagementLogin checks credentials presented to the management API
// from remote as connection.start-ok's are (auth.go): guest/guest from a
// loopback address only, or, with Config.Accounts, an account of the ACL
// file, which must moreover be an admin account (the API shows every
// queue, connection and user name: an account whose rights are limited
// to some names may not read it).
func (s *Server) ManagementLogin(user, pass string, remote net.Addr) bool {
	acct, ok := s.authenticate(user, pass, remote)
	return ok && (s.cfg.Accounts == nil || acct != nil && acct.Admin)
}

// QueueArguments returns a queue's queue.declare arguments as JSON
// values; nil without arguments or without such a queue.
func (s *Server) QueueArguments(vhost, name string) map[string]any {
	v := s.vhosts[vhost]
	if v == nil {
		return nil
	}
	v.mu.Lock()
	q := v.queues[name]
	v.mu.Unlock()
	if q == nil {
		return nil
	}
	return tableJSON(q.args) // fixed at declare
}

// ExchangeArguments returns the arguments an exchange acts on
// (alternate-exchange) as JSON values; nil if none or no such exchange.
func (s *Server) ExchangeArguments(vhost, name string) map[string]any {
	v := s.vhosts[vhost]
	if v == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if e := v.exchanges[name]; e != nil && e.alternate != "" {
		return map[string]any{"alternate-exchange": e.alternate}
	}
	return nil
}

// tableJSON returns a field table as JSON values, as RabbitMQ's
// management API shows them: strings and byte arrays as strings,
// decimals and timestamps as numbers, tables as objects, arrays as lists.
func tableJSON(t wire.Table) map[string]any {
	if len(t) == 0 {
		return nil
	}
	out := make(map[string]any, len(t))
	for k, v := range t {
		out[k] = valueJSON(v)
	}
	return out
}

func valueJSON(v any) any {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case wire.Binary:
		return string(x)
	case wire.Decimal:
		return float64(x.Value) / math.Pow10(int(x.Scale))
	case wire.Timestamp:
		return uint64(x)
	case wire.Table:
		if m := tableJSON(x); m != nil {
			return m
		}
		return map[string]any{}
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = valueJSON(e)
		}
		return l
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil
		}
		return x
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil // JSON has no NaN nor infinity
		}
		return x
	}
	return v // bool, integers, nil
}

// ForceClose closes the open connection named name (as ConnectionDetails
// names it) for an operator: the client gets connection.close 320
// CONNECTION_FORCED with reason, its unacknowledged deliveries go back to
// their queues, as when it closes itself. It reports whether such a
// connection was open; the close completes on the connection's own
// reader, within a second of the call.
func (s *Server) ForceClose(name, reason string) bool {
	cs, shown := s.openConns()
	for i, c := range cs {
		if shown[i].name != name {
			continue
		}
		s.log.Info("amqp: connection closed by an operator", "connection", name, "user", shown[i].user,
			"vhost", shown[i].vhost, "reason", reason)
		c.forceClose(hard(wire.ConnectionForced, nil, "%s", reason))
		return true
	}
	return false
}
