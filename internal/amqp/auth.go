package amqp

// Accounts and permissions.
//
// Without Config.Accounts (aclEnable=false) a connection may do
// everything once authenticated against Config.Users, or as guest/guest
// from a loopback address. With Config.Accounts (aclEnable=true, the
// accounts of plain_acl.yml) PLAIN and AMQPLAIN check the user as an
// accessKey and the password as its secretKey, guest is refused (it is
// not an account; RabbitMQ's loopback-only guest would bypass the ACL), and
// every method is checked against the account's topic permissions, the
// AMQP name (a queue or exchange) standing for the topic:
//
//	basic.publish                       PUB on the exchange (the default exchange: on the queue named by the routing key)
//	basic.consume, basic.get, purge     SUB on the queue
//	queue/exchange declare, delete      PUB or SUB on its name
//	queue.bind                          SUB on the exchange, PUB or SUB on the queue
//	exchange.bind                       SUB on the source, PUB or SUB on the destination
//	queue.unbind, exchange.unbind       PUB or SUB on both names
//	queue.declare with x-keel-topic T   also SUB on the topic T
//	basic.publish routed to a queue     also PUB on its topic T
//	over a Keel topic T
//
// with RocketMQ's rules: DENY wins, an unlisted name gets
// defaultTopicPerm, an admin account without topic or group rules may do
// everything. A refusal is a channel exception 403 ACCESS_REFUSED.
// Address white lists do not apply: AMQP always carries a password.

import (
	"crypto/subtle"
	"net"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/amqp/wire"
)

// authenticate checks a user's password and returns the account whose
// permissions apply (nil: everything is allowed).
func (s *Server) authenticate(user, pass string, remote net.Addr) (*acl.Account, bool) {
	if s.cfg.Accounts != nil {
		rules := s.cfg.Accounts()
		if rules == nil {
			return nil, false
		}
		a := rules.Accounts[user]
		if a == nil || subtle.ConstantTimeCompare([]byte(a.SecretKey()), []byte(pass)) != 1 {
			return nil, false
		}
		return a, true
	}
	if want, ok := s.cfg.Users[user]; ok {
		return nil, subtle.ConstantTimeCompare([]byte(want), []byte(pass)) == 1
	}
	if user != "guest" || pass != "guest" {
		return nil, false
	}
	ta, ok := remote.(*net.TCPAddr)
	return nil, ok && ta.IP.IsLoopback()
}

// allow checks that the connection's account holds need on every name
// (queues or exchanges); m is the method for the 403.
func (c *conn) allow(m wire.Method, need acl.Perm, names ...string) error {
	a := c.acct
	if a == nil || a.Admin && len(a.TopicPerms) == 0 && len(a.GroupPerms) == 0 {
		return nil
	}
	for _, n := range names {
		if c.vh.name != defaultVhost {
			n = c.vh.name + "/" + n // another vhost's names are prefixed with it
		}
		owned, listed := a.TopicPerms[n]
		if !listed {
			owned = a.DefaultTopicPerm
		}
		if !allows(owned, need) {
			return soft(wire.AccessRefused, m, "access to '%s' in vhost '%s' refused for user '%s' (%s needed, %s held)", n, c.vh.name, c.user, need, owned)
		}
	}
	return nil
}

// allowTopic checks that the connection's account holds need on a Keel
// topic itself: a queue over a Keel topic (x-keel-topic) delivers that
// topic's records and stores what is routed to it there, so its name
// alone does not grant them. Topics are global: no vhost prefix.
func (c *conn) allowTopic(m wire.Method, need acl.Perm, topic string) error {
	a := c.acct
	if a == nil || a.Admin && len(a.TopicPerms) == 0 && len(a.GroupPerms) == 0 {
		return nil
	}
	owned, listed := a.TopicPerms[topic]
	if !listed {
		owned = a.DefaultTopicPerm
	}
	if !allows(owned, need) {
		return soft(wire.AccessRefused, m, "access to topic '%s' refused for user '%s' (%s needed, %s held)", topic, c.user, need, owned)
	}
	return nil
}

// allows is RocketMQ's permission check: DENY wins; Any is met by PUB or
// SUB.
func allows(owned, need acl.Perm) bool {
	if owned&acl.Deny != 0 {
		return false
	}
	if need&acl.Any != 0 {
		return owned&(acl.Pub|acl.Sub) != 0
	}
	return need&owned != 0
}
