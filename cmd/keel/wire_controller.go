package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/controller"
	"github.com/keelmq/keel/internal/metrics"
)

// controllerStarter builds a controller node on the bound controller
// listener: raft and the RPCs share it. Stop: raft shuts down (a leader
// stops acting first), then the listener and the raft log close.
// The node is stored in *node for the starters after it.
func (p *parts) controllerStarter(cc *config.Controller, voters []controller.Voter, node **controller.Controller) starter {
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
			DetectionPeriod: cc.DetectionPeriod, ScanInterval: cc.ScanInterval, FenceTimeout: cc.FenceTimeout, LeaseDuration: cc.LeaseDuration,
			AllowUnclean: cc.ElectUncleanMaster, NotifyRoleChange: cc.NotifyBrokerRoleChanged,
			Logger: p.log.With("component", "controller"),
		})
		if err != nil {
			ln.Close()
			return service{}, err
		}
		if node != nil {
			*node = c
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

// controllerHTTPStarter serves the controller's /metrics and /healthz on
// addr (nothing if empty); it comes after controllerStarter, which set
// *node.
func (p *parts) controllerHTTPStarter(addr string, node **controller.Controller) starter {
	return func() (service, error) {
		if addr == "" {
			return service{name: "http"}, nil
		}
		c := *node
		if c == nil {
			return service{}, errors.New("http: the controller must start first")
		}
		m := metrics.NewController(func() metrics.ControllerStats { return controllerStats(c.Stats()) }, nil, true)
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.Handler())
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		ln, err := p.listen(listenHTTP, addr)
		if err != nil {
			return service{}, err
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: httpReadHeaderTimeout}
		p.log.Info("HTTP listening", "component", "http", "addr", ln.Addr().String(), "serves", "/metrics, /healthz",
			"auth", "none", "reach", reach(ln.Addr()))
		return service{
			name: "http",
			run: func(context.Context) error {
				if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
					return err
				}
				return nil
			},
			stop: func(ctx context.Context) error {
				err := srv.Shutdown(ctx)
				ln.Close()
				return err
			},
		}, nil
	}
}

// controllerStats copies a node's figures for the metrics.
func controllerStats(s controller.Stats) metrics.ControllerStats {
	out := metrics.ControllerStats{RaftState: s.State, Voter: s.Voter, LeaderKnown: s.LeaderKnown, Acting: s.Acting, Term: s.Term,
		Elections: s.Elections, FencedReplicas: s.FencedReplicas}
	for _, g := range s.Groups {
		out.Groups = append(out.Groups, metrics.ControllerGroupStats{Group: g.Name, MasterEpoch: g.MasterEpoch,
			WithoutMasterSince: g.WithoutMasterSince})
	}
	return out
}
