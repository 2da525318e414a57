package main

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/keelmq/keel/internal/amqp"
	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
)

// An AMQP door of a cluster member (docs/amqp.md, "A cluster of broker
// groups"): a master registers its door's address with the NameServers
// (namesrv.AMQPExt) and finds the other groups' doors there
// (GET_AMQP_CLUSTER), to which it forwards what concerns their queues.

// amqpCluster is amqp.Cluster over the NameServers.
type amqpCluster struct {
	b       *broker.Broker
	cluster string
	group   string      // this member's brokerName, left out
	tls     *tls.Config // how amqps doors are dialled (parts.memberTLS)
	// preferTLS: a door with both listeners is dialled on its amqps one
	// (config.PeersTLS).
	preferTLS bool
}

func (a amqpCluster) Peers(ctx context.Context) ([]amqp.Peer, error) {
	var ac namesrv.AMQPCluster
	err := a.b.AskNamesrv(ctx, func(c *remoting.Client) (err error) {
		ac, err = namesrv.GetAMQPCluster(ctx, c, a.cluster)
		return err
	})
	if err != nil {
		return nil, err
	}
	return amqpPeers(ac, a.group, a.door), nil
}

// door chooses the address m's door is dialled on: its amqps door when
// this member prefers TLS or it has no plain one, else its plain one.
func (a amqpCluster) door(m namesrv.AMQPMember) (string, *tls.Config) {
	if m.AMQPSAddr != "" && (a.preferTLS || m.AMQPAddr == "") {
		return m.AMQPSAddr, a.tls
	}
	return m.AMQPAddr, nil
}

// amqpPeers are the doors of the other groups' masters in ac. A door on
// a loopback address of a member on another host (its RocketMQ address's
// host is not this member's) cannot be reached from here: it is listed
// as unreachable, so that its queues fail clearly instead of a dial to
// this host's own loopback.
func amqpPeers(ac namesrv.AMQPCluster, group string, door func(namesrv.AMQPMember) (string, *tls.Config)) []amqp.Peer {
	self := ""
	for _, m := range ac.Members {
		if m.BrokerName == group && m.BrokerID == 0 {
			self, _, _ = net.SplitHostPort(m.Addr)
		}
	}
	var ps []amqp.Peer
	for _, m := range ac.Members {
		if m.BrokerID != 0 || m.BrokerName == group { // a master's door of another group only
			continue
		}
		p := amqp.Peer{Group: m.BrokerName}
		p.Addr, p.TLS = door(m)
		host, _, _ := net.SplitHostPort(p.Addr)
		peerHost, _, _ := net.SplitHostPort(m.Addr)
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() && self != "" && peerHost != self {
			key := "amqpListen"
			if p.TLS != nil {
				key = "amqpsListen"
			}
			p.Unreachable = "its AMQP door listens on " + p.Addr + " (loopback) on another host (" + peerHost +
				"): set " + key + " there to an address the other members reach"
		}
		ps = append(ps, p)
	}
	return ps
}

// amqpClusterAddr is the address the other members dial for the AMQP
// door bound at bound: the bound address, or brokerIP1 with its port when
// it is bound to every interface.
func (p *parts) amqpClusterAddr(bound net.Addr) string {
	host, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return bound.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = p.cfg.BrokerIP1
		if host == "" {
			host = "127.0.0.1"
		}
	}
	return net.JoinHostPort(host, port)
}
