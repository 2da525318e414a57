package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/keelmq/keel/internal/amqpmgmt"
	"github.com/keelmq/keel/internal/config"
)

// The AMQP management listener (amqpManagementListen; empty = off): the
// read-only subset of RabbitMQ's management HTTP API over the AMQP door
// (internal/amqpmgmt, docs/amqp.md#management-api).

// listenAMQPManagement names the listener; amqpManagementListenFlag is
// where its address is changed.
const (
	listenAMQPManagement     = "AMQP management"
	amqpManagementListenFlag = "amqpManagementListen in broker.conf"
)

// checkAMQPManagementExposure refuses a management listener without an
// AMQP door, and one reachable
// beyond this host without aclEnable=true: its only login is then
// guest/guest, which is accepted from loopback only, so such a listener
// would serve no one there and answer every attempt to guess a password.
// It runs right after the listeners are bound, before any service starts.
func checkAMQPManagementExposure(cfg *config.Broker, ls boundListeners) error {
	ln := ls[listenAMQPManagement]
	if ln == nil {
		return nil
	}
	if cfg.AMQPListen == "" && cfg.AMQPSListen == "" {
		ls.closeAll()
		return errors.New("amqpManagementListen needs the AMQP door it reports on: set amqpListen or amqpsListen, or leave amqpManagementListen empty")
	}
	if loopback(ln.Addr()) || cfg.ACLEnable {
		return nil
	}
	ls.closeAll()
	return fmt.Errorf("AMQP management listener on %s is reachable beyond this host, but without aclEnable=true its only account is guest, "+
		"which logs in from loopback only: set aclEnable=true (admin accounts of plain_acl.yml log in) or listen on loopback (amqpManagementListen=127.0.0.1:15672)",
		cfg.AMQPManagementListen)
}

// amqpManagementStarter serves the management API on addr ("" = off); it
// must come after the AMQP starter, whose door it reads. It stops before
// the door (starters stop in reverse).
func (p *parts) amqpManagementStarter(addr string) starter {
	return func() (service, error) {
		if addr == "" {
			return service{name: "amqp management (off)"}, nil
		}
		srv := p.amqp
		if srv == nil {
			return service{}, errors.New("amqpManagementListen needs the AMQP door: set amqpListen or amqpsListen")
		}
		auth := "guest from loopback only"
		if p.acl != nil {
			auth = "ACL admin accounts (plain_acl.yml)"
		}
		log := p.log.With("component", "amqp-management")
		mcfg := amqpmgmt.Config{Source: srv, Login: srv.ManagementLogin, Node: amqpNode(p.cfg.BrokerName),
			Version: version, Listeners: p.amqpBound, Log: log}
		if p.broker != nil && len(p.namesrvAddrs) > 0 { // a cluster's member: its queues (wire_amqp_listing.go)
			tc, err := p.peerTLS()
			if err != nil {
				return service{}, err
			}
			l := newAMQPListing(p.broker, p.cfg.BrokerClusterName, p.cfg.BrokerName, tc)
			if a := p.acl; a != nil {
				l.secret = func(user string) (string, bool) {
					if acct := a.Account(user); acct != nil {
						return acct.SecretKey(), true
					}
					return "", false
				}
			}
			mcfg.Cluster = l.groups
		}
		h := amqpmgmt.Handler(mcfg)
		ln, err := p.listen(listenAMQPManagement, addr)
		if err != nil {
			return service{}, err
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: httpReadHeaderTimeout}
		log.Info("amqp management listening", "addr", ln.Addr().String(), "auth", auth, "reach", reach(ln.Addr()))
		return service{
			name: "amqp management",
			run: func(context.Context) error {
				if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
					return err
				}
				return nil
			},
			stop: func(ctx context.Context) error {
				err := hs.Shutdown(ctx)
				ln.Close()
				return err
			},
		}, nil
	}
}
