package main

import (
	"context"
	"errors"
	"maps"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/amqp"
	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
)

// brokerConfig converts the broker config into the broker package's.
// Keys the broker package does not consume yet (messageDelayLevel,
// transaction and duplication settings, notifyConsumerIdsChangedEnable) are
// validated by config but not passed on.
func brokerConfig(b *config.Broker, advertised string, namesrvAddrs []string) broker.Config {
	c := broker.DefaultConfig()
	c.ClusterName = b.BrokerClusterName
	c.BrokerName = b.BrokerName
	c.BrokerID = b.BrokerID
	c.AdvertisedAddr = advertised
	c.DataDir = b.StorePathRootDir
	c.NamesrvAddrs = namesrvAddrs
	c.BrokerPermission = int32(b.BrokerPermission)
	c.AutoCreateTopicEnable = b.AutoCreateTopicEnable
	c.AutoCreateSubscriptionGroup = b.AutoCreateSubscriptionGroup
	c.DefaultTopicQueueNums = int32(b.DefaultTopicQueueNums)
	c.MaxQueueNums = config.MaxTopicQueueNums
	c.MaxMessageSize = b.MaxMessageBytes
	c.RetryMaxTimes = int32(b.MaxReconsumeTimes)
	c.LongPollingEnable = b.LongPollingEnable
	c.ShortPollingTimeout = b.ShortPollingTime
	c.ChannelExpiredTimeout = b.ChannelExpiredTimeout
	c.SlaveReadEnable = b.SlaveReadEnable
	return c
}

// brokerStarters listen on listenAddr first (the advertised address needs
// the bound port), then build the core on the open store (once: the Kafka
// front door gets the same one, p.core), then the RocketMQ front door on
// the core. Stop order (reverse): broker.Close answers its held pulls and
// unregisters from the NameServers; the core wakes every other wait and
// flushes consumer offsets; then the server stops accepting, lets handlers
// finish and closes the connections. The store closes after all of them.
// With aclEnable=true every request passes the ACL check first; with TLS on
// the listener serves tlsMode.
func (p *parts) brokerStarters(listenAddr string) []starter {
	var b *broker.Broker   // set by the fourth starter, before any request is served
	var h remoting.Handler // b's handler behind the ACL check, set with b
	var bc broker.Config   // set by the core's starter
	var adv string         // the advertised address, set with bc
	handler := lateHandler{&h}
	return []starter{
		p.aclStarter(),
		func() (service, error) {
			wrap, err := p.tlsWrap("broker-server", p.cfg.TLSMode)
			if err != nil {
				return service{}, err
			}
			cfg := remoting.ServerConfig{
				MaxFrameBytes: p.cfg.MaxFrameBytes,
				Logger:        p.log.With("component", "broker-server"),
				OnConnClose:   func(c *remoting.Conn) { b.OnConnClose(c) },
				Traffic:       &p.traffic.rocketmq,
				FrameBudget:   p.requestBudget().Door("remoting"),
			}
			ln, err := p.listen(listenBroker, listenAddr)
			if err != nil {
				return service{}, err
			}
			svc, bound, err := remotingService("broker server", ln, cfg, handler, wrap)
			p.brokerBound = bound
			return svc, err
		},
		func() (service, error) {
			var err error
			if adv, err = advertisedAddr(p.cfg, listenAddr, p.brokerBound, p.log); err != nil {
				return service{}, err
			}
			bc = brokerConfig(p.cfg, adv, p.namesrvAddrs)
			bc.NamesrvTLS = p.namesrvClientTLS
			bc.Version, bc.RuntimeInfo = version, p.runtimeInfo
			bc.SendGate, bc.HAAddr = p.sendGate, p.haAdvertised(adv)
			bc.OnMasterAddress = p.onMasterAddress
			bc.MasterEpoch = p.masterEpoch
			bc.SystemRecords = p.haBound != nil // a master serving slaves: metadata travels with the log
			return p.coreService(bc)
		},
		func() (service, error) {
			var err error
			b, err = broker.NewOnCore(bc, p.core, p.log.With("component", "broker"))
			if err != nil {
				return service{}, err
			}
			p.broker = b
			if p.onMasterAddress != nil {
				f := b.RegisterSoon
				p.registerSoon.Store(&f)
			}
			h = acl.Wrap(b.Handler(), p.acl)
			if p.brokerSide != nil {
				h = controllerHandler{inner: h, side: p.brokerSide}
			}
			p.log.Info("broker listening", "addr", p.brokerBound.String(), "advertised", adv, "namesrv", p.namesrvAddrs,
				"acl", p.acl != nil, "tls", p.cfg.TLSMode, "auth", brokerAuthDescription(p.acl != nil), "reach", reach(p.brokerBound))
			return service{
				name: "broker",
				run:  b.Run,
				stop: func(context.Context) error { return b.Close() },
			}, nil
		},
	}
}

// coreService builds the core on the open store with the core's part of
// the broker configuration. It runs the periodic offset flush; its stop,
// after the front doors built on it stopped, wakes every wait still held
// and flushes the committed offsets.
func (p *parts) coreService(bc broker.Config) (service, error) {
	if p.store == nil {
		return service{}, errors.New("core: the store must open first")
	}
	cc, err := broker.CoreConfig(bc)
	if err != nil {
		return service{}, err
	}
	// The AMQP door's state travels with the log (internal/amqp
	// replicate.go): every role keeps it from the records, so that a
	// slave promoted in place, or restarted as a master, opens its AMQP
	// door with the queues of its log.
	mirror, err := amqp.NewMirror(cc.FS, cc.DataDir, p.log.With("component", "amqp-state"))
	if err != nil {
		return service{}, err
	}
	if p.store.Replica() {
		mirror.DeleteTopic = p.store.DeleteReplicatedTopic // the master deleted a deleted queue's topic
	}
	cc.Tables = append(cc.Tables, mirror)
	c, err := core.New(cc, p.store, p.log.With("component", "core"))
	if err != nil {
		return service{}, err
	}
	// Until an AMQP door installs its own (a master's), retention keeps
	// what the records say is unsettled: a slave's log holds the messages
	// a new master would deliver.
	p.store.SetQueueHolds(mirror.Holds)
	p.core = c
	p.replCore.Store(c) // the replication service, started before, reads it
	return service{
		name: "core",
		run:  c.Run,
		stop: func(context.Context) error {
			c.Close()
			return c.FlushOffsets()
		},
	}, nil
}

// lateHandler serves with a handler set after the server was made; it
// borrows request bodies and runs requests inline (in bursts) where that
// handler does (remoting.BodyBorrower, remoting.InlineRunner,
// remoting.BurstRunner).
type lateHandler struct{ h *remoting.Handler }

func (l lateHandler) Handle(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	return (*l.h).Handle(ctx, c, req)
}

func (l lateHandler) BorrowsBody(code int16) bool { return remoting.BorrowsBody(*l.h, code) }

func (l lateHandler) RunsInline(req *remoting.Command) bool { return remoting.RunsInline(*l.h, req) }

func (l lateHandler) ListsExt(code int16) bool { return remoting.ListsExt(*l.h, code) }

func (l lateHandler) HandleBurst(ctx context.Context, c *remoting.Conn, reqs, resps []*remoting.Command) {
	remoting.HandleBurst(ctx, *l.h, c, reqs, resps)
}

// runtimeInfo adds the recent send and flush latency to the broker's
// GET_BROKER_RUNTIME_INFO once the metrics exist (the console shows them).
func (p *parts) runtimeInfo() map[string]string {
	var info map[string]string
	if m := p.metrics.Load(); m != nil {
		info = m.RuntimeInfo()
	}
	if p.replicationInfo != nil {
		if info == nil {
			info = map[string]string{}
		}
		maps.Copy(info, p.replicationInfo())
	}
	return info
}
