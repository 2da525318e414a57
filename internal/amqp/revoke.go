package amqp

// Secrets that stop being valid (Config.Accounts: plain_acl.yml, which
// the ACL reloads while the broker runs). Every connection remembers the
// rules its password was checked against; at every accountsCheckInterval
// the door checks again, against the rules in force, the password of each
// connection checked against older ones, and closes with 320
// CONNECTION_FORCED each one whose password no longer logs its user in (a
// rotated secret, a removed account): an operator who rotates a secret
// expects the old one to stop working, not to live on in the connections
// it opened. Its deliveries go back to their queues as at any close; the
// client reconnects with the new secret. A change of permissions alone
// closes nothing (the connection keeps the permissions it logged in with,
// as documented, until update-secret).
//
// The connections other groups' doors open here (forward.go: as a client
// of theirs, or as their Config.PeerAccount) are connections like any
// other: the home, which checks the secret, closes them; the member that
// opened one reopens it, when next needed, with the secret in force then
// (the client's current password; the peer account's secret read from its
// own rules at every dial, deadletter_remote.go).

import (
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/amqp/wire"
)

// accountsCheckInterval is how often the door looks for connections whose
// password the rules in force no longer accept. A variable for tests.
var accountsCheckInterval = time.Second

// watchAccounts runs checkSecrets every accountsCheckInterval until the
// server closes (only with Config.Accounts).
func (s *Server) watchAccounts() {
	defer s.wg.Done()
	t := time.NewTicker(accountsCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.checkSecrets()
	}
}

// checkSecrets closes the open connections whose password the rules in
// force no longer accept, and marks the others as checked against them.
// The check holds the connection's infoMu, which the reader's login and
// update-secret take to record what they checked (loggedIn).
func (s *Server) checkSecrets() {
	rules := s.cfg.Accounts()
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.infoMu.Lock()
		if c.infoRules == nil || c.infoRules == rules {
			c.infoMu.Unlock()
			continue // not logged in yet, closing, or checked against these rules
		}
		user := c.infoUser
		_, ok := s.authenticate(user, c.infoSecret, c.nc.RemoteAddr())
		if ok {
			c.infoRules = rules
		} else {
			c.infoRules = nil // closing: not checked again
		}
		c.infoMu.Unlock()
		if ok {
			continue
		}
		s.log.Warn("amqp: connection closed: its password no longer logs its user in (the account's secret changed, or the account is gone)",
			"remote", c.nc.RemoteAddr().String(), "user", user)
		c.forceClose(hard(wire.ConnectionForced, nil, "the secret this connection logged in with is no longer valid for user '%s'", user))
	}
}

// loggedIn records, for checkSecrets, the password the reader has just
// checked (at login and update-secret) and the rules it checked it
// against, loaded before the check (rules reloaded meanwhile have it
// checked again: once more than needed, never once less). rules is nil
// without Config.Accounts: nothing is checked again.
func (c *conn) loggedIn(user, secret string, rules *acl.Rules) {
	c.infoMu.Lock()
	c.infoUser, c.infoSecret, c.infoRules = user, secret, rules
	c.infoMu.Unlock()
}

// forceClose has the connection's reader send e as connection.close and
// end (ForceClose, checkSecrets): it is woken by a read deadline in the
// past.
func (c *conn) forceClose(e *amqpError) {
	c.forced.Store(e)
	c.nc.SetReadDeadline(time.Now().Add(-time.Second))
}

// rulesInForce returns the ACL rules in force (nil without
// Config.Accounts).
func (s *Server) rulesInForce() *acl.Rules {
	if s.cfg.Accounts == nil {
		return nil
	}
	return s.cfg.Accounts()
}
