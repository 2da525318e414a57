package main

import (
	"context"
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
	group   string // this member's brokerName, left out
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
	var ps []amqp.Peer
	for _, m := range ac.Members {
		if m.BrokerID != 0 || m.BrokerName == a.group { // a master's door of another group only
			continue
		}
		ps = append(ps, amqp.Peer{Group: m.BrokerName, Addr: m.AMQPAddr})
	}
	return ps, nil
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
