package main

import (
	"context"
	"fmt"
	"net"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/controller"
)

// controllerStarter builds a controller node on the bound controller
// listener: raft and the RPCs share it. Stop: raft shuts down (a leader
// stops acting first), then the listener and the raft log close.
func (p *parts) controllerStarter(cc *config.Controller, voters []controller.Voter) starter {
	return func() (service, error) {
		adv, id, err := controllerIdentity(cc, voters)
		if err != nil {
			return service{}, err
		}
		ln, err := p.listen(listenController, cc.Listen)
		if err != nil {
			return service{}, err
		}
		c, err := controller.Open(controller.Config{
			NodeID: id, Addr: adv, Listener: ln, DataDir: cc.StorePath, Bootstrap: voters,
			DetectionPeriod: cc.DetectionPeriod, ScanInterval: cc.ScanInterval, FenceTimeout: cc.FenceTimeout,
			AllowUnclean: cc.ElectUncleanMaster, NotifyRoleChange: cc.NotifyBrokerRoleChanged,
			Logger: p.log.With("component", "controller"),
		})
		if err != nil {
			ln.Close()
			return service{}, err
		}
		p.log.Info("controller listening", "addr", ln.Addr().String(), "advertise", adv, "node_id", id,
			"cluster_id", c.ClusterID(), "bootstrap", voters != nil, "unclean_elections", cc.ElectUncleanMaster,
			"auth", "none (the controller does no access control: keep it on a private network)")
		return service{
			name: "controller",
			run:  c.Run,
			stop: func(context.Context) error { return c.Close() },
		}, nil
	}
}

// controllerIdentity is the address others dial and the raft id: the
// configured ones, else those of the bootstrap voter on the listen port.
func controllerIdentity(cc *config.Controller, voters []controller.Voter) (addr, id string, err error) {
	addr, err = cc.AdvertiseAddr()
	if err != nil {
		_, port, _ := net.SplitHostPort(cc.Listen)
		for _, v := range voters {
			if _, vp, _ := net.SplitHostPort(v.Addr); vp == port && (cc.SelfID == "" || cc.SelfID == v.ID) {
				addr, err = v.Addr, nil
				break
			}
		}
		if err != nil {
			return "", "", err
		}
	}
	id = cc.SelfID
	for _, v := range voters {
		if id == "" && v.Addr == addr {
			id = v.ID
		}
	}
	if id == "" {
		id = addr
	}
	if voters != nil {
		for _, v := range voters {
			if v.ID == id {
				return addr, id, nil
			}
		}
		return "", "", fmt.Errorf("--bootstrap: the voters do not include this node (id %s, address %s); set --node-id or --controller-advertise", id, addr)
	}
	return addr, id, nil
}
