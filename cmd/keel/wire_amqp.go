package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/amqp"
	"github.com/keelmq/keel/internal/amqpmgmt"
	"github.com/keelmq/keel/internal/doorstats"
	"github.com/keelmq/keel/internal/metrics"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/tlsconf"
)

// amqpListenFlag is where the AMQP listener's address is changed.
const amqpListenFlag = "--amqp-listen or amqpListen in broker.conf"

// listenAMQP names the AMQP listener.
const listenAMQP = "AMQP"

// amqpStarter serves AMQP 0-9-1 on addr ("" = off) and, with amqpsListen
// set, AMQP over TLS on that address, over the open store. With
// aclEnable=true the ACL accounts authenticate AMQP clients too. It stops
// before the store closes (starters stop in reverse): Close requeues
// unacknowledged deliveries and writes the acknowledgement state.
func (p *parts) amqpStarter(addr string) starter {
	return func() (service, error) {
		tlsAddr := p.cfg.AMQPSListen
		if addr == "" && tlsAddr == "" {
			return service{name: "amqp (off)"}, nil
		}
		cfg := amqp.Config{DataDir: p.cfg.StorePathRootDir, Vhosts: p.cfg.AMQPVhostList(),
			ConsumerTimeout: p.cfg.AMQPConsumerTimeoutOrNever(), MaxMessageBytes: p.cfg.AMQPMaxMessage(),
			Traffic: &p.traffic.amqp, Observer: doorObserver{p, doorstats.AMQP},
			FrameBudget: p.requestBudget().Door("amqp"),
			// A master serving slaves: definitions and acknowledgement
			// state travel with the log.
			SystemRecords: p.haBound != nil}
		auth := "guest from loopback only"
		if a := p.acl; a != nil {
			cfg.Accounts = func() *acl.Rules { return a.Rules() }
			auth = "ACL accounts (plain_acl.yml)"
			if n := p.cfg.AMQPPeerAccount; n != "" {
				if r := a.Rules(); r == nil || r.Accounts[n] == nil {
					return service{}, fmt.Errorf("amqpPeerAccount %q is not an account of plain_acl.yml", n)
				}
				cfg.PeerAccount = n
			}
		}
		clustered := p.broker != nil && len(p.namesrvAddrs) > 0
		if clustered { // wire_amqp_cluster.go
			tc, err := p.memberTLS()
			if err != nil {
				return service{}, err
			}
			cfg.Cluster = amqpCluster{b: p.broker, cluster: p.cfg.BrokerClusterName, group: p.cfg.BrokerName,
				tls: tc, preferTLS: p.cfg.PeersTLS()}
			cfg.Group = p.cfg.BrokerName
		}
		srv, err := amqp.New(cfg, p.store, p.log.With("component", "amqp"))
		if err != nil {
			return service{}, err
		}
		p.amqp = srv
		if p.amqpStarted != nil {
			p.amqpStarted(srv)
		}
		if p.broker != nil {
			p.broker.SetAMQPInfo(func() (any, any, any) { return amqpReportQueues(srv), srv.Exchanges(), srv.Connections() })
		}
		var lns []net.Listener
		var door, tlsDoor string // the addresses registered for the cluster
		fail := func(err error) (service, error) {
			for _, ln := range lns {
				ln.Close()
			}
			srv.Close()
			return service{}, err
		}
		if addr != "" {
			ln, err := p.listen(listenAMQP, addr)
			if err != nil {
				return fail(err)
			}
			lns = append(lns, ln)
			p.amqpBound = append(p.amqpBound, amqpmgmt.Listener{Protocol: "amqp", Addr: ln.Addr()})
			p.log.Info("amqp listening", "addr", ln.Addr().String(), "auth", auth, "reach", reach(ln.Addr()))
			door = p.amqpClusterAddr(ln.Addr())
		}
		if tlsAddr != "" {
			ln, err := p.amqpsListener(tlsAddr)
			if err != nil {
				return fail(err)
			}
			lns = append(lns, ln)
			p.amqpBound = append(p.amqpBound, amqpmgmt.Listener{Protocol: "amqp/ssl", Addr: ln.Addr()})
			p.log.Info("amqps listening", "addr", ln.Addr().String(), "auth", auth, "reach", reach(ln.Addr()))
			tlsDoor = p.amqpClusterAddr(ln.Addr())
		}
		if clustered { // the doors the other members forward to
			ext := namesrv.AMQPExt(door, tlsDoor)
			p.broker.AddRegisterExt("amqp", func() map[string]string { return ext })
			p.broker.SetAMQPMissing(srv.UnreachableGroups)
		}
		done := make(chan error, len(lns))
		for _, ln := range lns {
			go func() { done <- srv.Serve(ln) }()
		}
		return service{
			name: "amqp",
			run: func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					return nil
				case err := <-done:
					if err == nil || errors.Is(err, net.ErrClosed) {
						err = errors.New("amqp listener stopped")
					}
					return err
				}
			},
			stop: func(context.Context) error {
				if p.broker != nil {
					p.broker.SetAMQPInfo(nil)
					p.broker.SetAMQPMissing(nil)
					p.broker.AddRegisterExt("amqp", nil)
				}
				return srv.Close()
			},
		}, nil
	}
}

// amqpsListener listens on addr for AMQP over TLS with the listeners'
// certificate (tlsServerCertPath, tlsServerKeyPath, client certificates as
// tlsServerNeedClientAuth says), whatever tlsMode is.
func (p *parts) amqpsListener(addr string) (net.Listener, error) {
	tc, err := tlsconf.ServerTLS(tlsconf.Config{
		CertFile:      p.cfg.TLSServerCertPath,
		KeyFile:       p.cfg.TLSServerKeyPath,
		TrustCertFile: p.cfg.TLSServerTrustCertPath,
		ClientAuth:    tlsconf.ClientAuth(p.cfg.TLSServerNeedClientAuth),
	})
	if err != nil {
		return nil, fmt.Errorf("amqps: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("amqps: %w", err)
	}
	ln = p.limitListener("AMQPS", ln)
	return tls.NewListener(ln, tc), nil
}

// amqpReportQueues are the queues of LIST_AMQP: with their arguments,
// for the other members' management API (wire_amqp_listing.go).
func amqpReportQueues(srv *amqp.Server) []amqpmgmt.Queue {
	qs := srv.Queues()
	out := make([]amqpmgmt.Queue, len(qs))
	for i, q := range qs {
		out[i] = amqpmgmt.Queue{Queue: q, Arguments: srv.QueueArguments(q.Vhost, q.Name)}
	}
	return out
}

// amqpStats is metrics.Sources.AMQP: the AMQP queues, nil without an AMQP
// listener.
func (p *parts) amqpStats() func() []metrics.AMQPQueueStats {
	srv := p.amqp
	if srv == nil {
		return nil
	}
	return func() []metrics.AMQPQueueStats {
		qs := srv.Queues()
		out := make([]metrics.AMQPQueueStats, len(qs))
		for i, q := range qs {
			out[i] = metrics.AMQPQueueStats{Vhost: q.Vhost, Queue: q.Name, Ready: q.Ready, Unacked: q.Unacked, Consumers: q.Consumers,
				OldestUnsettledAge: float64(q.OldestUnsettledAgeMs) / 1000, Published: q.Published, Delivered: q.Delivered,
				Redelivered: q.Redelivered, Acked: q.Acked, DeadLettered: q.DeadLettered, Dropped: q.Dropped, Refused: q.Refused}
		}
		return out
	}
}
