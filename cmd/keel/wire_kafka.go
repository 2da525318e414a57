package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/doorstats"
	"github.com/keelmq/keel/internal/kafka"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/replication"
)

// kafkaStarter serves the Kafka front door on addr (nothing if empty) on
// the core the broker's starters built (p.core), which it shares with the
// RocketMQ front door; it must come after them.
func (p *parts) kafkaStarter(addr string) starter {
	return func() (service, error) {
		if addr == "" {
			if b := p.broker; b != nil && p.cfg.BrokerRole == config.Slave && p.cfg.KafkaListen != "" && len(p.namesrvAddrs) > 0 {
				// A slave's door is closed, but it is a replica of its
				// master's partitions: it registers its node id alone.
				nodeID, local := p.cfg.KafkaNode(), p.kafkaLocalGroup()
				b.SetRegisterExt(func() map[string]string {
					return namesrv.KafkaRegistration{NodeID: nodeID, Epoch: local().Epoch, Rack: p.cfg.KafkaBrokerRack}.Ext()
				}, (&kafkaRefusal{log: p.log.With("component", "kafka")}).answer)
			}
			return p.kafkaCleanerService()
		}
		if p.core == nil {
			return service{}, errors.New("kafka: the core must be built first")
		}
		host, port, err := kafkaAdvertised(p.cfg.KafkaAdvertisedListen, p.cfg.BrokerIP1, addr)
		if err != nil {
			return service{}, err
		}
		wrap, err := p.tlsWrap("kafka", p.cfg.TLSMode)
		if err != nil {
			return service{}, err
		}
		ln, err := p.listen(listenKafka, addr)
		if err != nil {
			return service{}, err
		}
		if wrap != nil { // the listeners' TLS (tlsMode), as the RocketMQ door's
			if ln, err = wrap(ln); err != nil {
				return service{}, err
			}
		}
		if a, ok := ln.Addr().(*net.TCPAddr); ok && port == 0 {
			port = int32(a.Port)
		}
		log := p.log.With("component", "kafka")
		var accounts kafka.Accounts
		if p.acl != nil {
			accounts = kafkaAccounts{p.acl}
		}
		local := p.kafkaLocalGroup()
		kcfg := kafka.Config{
			AdvertisedHost: host, AdvertisedPort: port, ClusterID: p.cfg.BrokerClusterName,
			NodeID: p.cfg.KafkaNode(), Group: p.cfg.BrokerName, BrokerID: p.cfg.BrokerID, LocalGroup: local,
			Rack: p.cfg.KafkaBrokerRack, Follower: p.cfg.BrokerRole == config.Slave,
			MaxRequestBytes: p.cfg.MaxFrameBytes, MaxBatchBytes: p.cfg.MaxMessageBytes,
			RetentionMs: p.cfg.FileReservedTime.Milliseconds(), SegmentBytes: p.cfg.CommitLogSegmentBytes,
			ACL: accounts, ProducerIDExpiration: p.cfg.KafkaProducerIDExpiration,
			InitialRebalanceDelay: p.cfg.KafkaGroupInitialRebalanceDelay, RetentionCheckInterval: p.cfg.KafkaRetentionCheckInterval,
			ConsumerGroupSessionTimeout: p.cfg.KafkaConsumerGroupSessionTimeout, ConsumerGroupHeartbeatInterval: p.cfg.KafkaConsumerGroupHeartbeatInterval,
			Traffic: &p.traffic.kafka, Observer: doorObserver{p, doorstats.Kafka},
			MaxConns: p.cfg.MaxConnections, Budget: p.requestBudget().Door("kafka"),
			DataDir: p.cfg.StorePathRootDir, FS: storeFS, CompactionInterval: p.cfg.KafkaCompactionInterval,
		}
		if h := p.epochHistory; h != nil {
			kcfg.EpochHistory = func() []kafka.EpochStart {
				hist := h()
				out := make([]kafka.EpochStart, 0, len(hist))
				for _, e := range hist {
					if e.Epoch <= math.MaxInt32 {
						out = append(out, kafka.EpochStart{Epoch: int32(e.Epoch), Start: e.Start})
					}
				}
				return out
			}
		}
		if m := p.roleMaster; m != nil {
			// Controller mode: a master fenced above its epoch leads
			// nothing from then on, until its restart as a slave; an
			// ASYNC_MASTER leads nothing while it holds no lease.
			kcfg.Replaced = func() bool { return !m.Acknowledges() }
		}
		if b := p.broker; b != nil && len(p.namesrvAddrs) > 0 {
			// A member of a cluster: its Kafka door is registered with the
			// NameServers, and Metadata is the cluster's (cluster.go).
			refusal := &kafkaRefusal{log: log}
			kcfg.Cluster = kafkaCluster{b: b, cluster: p.cfg.BrokerClusterName, refusal: refusal}
			peerTLS, err := p.peerTLS()
			if err != nil {
				ln.Close()
				return service{}, err
			}
			peers := newKafkaPeers(peerTLS)
			if a := p.acl; a != nil {
				peers.secret = func(user string) (string, bool) {
					if acct := a.Account(user); acct != nil {
						return acct.SecretKey(), true
					}
					return "", false
				}
			}
			kcfg.Peers = peers
			advertised := net.JoinHostPort(host, strconv.Itoa(int(port)))
			nodeID := kcfg.NodeID
			b.SetRegisterExt(func() map[string]string {
				l := local()
				return namesrv.KafkaRegistration{Addr: advertised, NodeID: nodeID, Epoch: l.Epoch, InSync: l.InSync, Rack: p.cfg.KafkaBrokerRack}.Ext()
			}, refusal.answer)
		}
		srv := kafka.New(kcfg, p.core, log)
		p.kafka.Store(srv)
		if p.broker != nil {
			p.broker.SetKafka(kafkaHooks(srv))
		}
		log.Info("Kafka listening", "addr", ln.Addr().String(), "advertised", net.JoinHostPort(host, strconv.Itoa(int(port))),
			"node_id", kcfg.NodeID, "cluster", kcfg.Cluster != nil, "rack", kcfg.Rack, "follower", kcfg.Follower,
			"auth", kafkaAuthDescription(p.acl != nil), "tls", p.cfg.TLSMode, "reach", reach(ln.Addr()))
		if advertisesLoopbackToNetwork(ln.Addr(), host) {
			log.Warn("the Kafka listener is reachable from the network but advertises "+host+
				": clients on other hosts are told to connect to themselves; set kafkaAdvertisedListen or brokerIP1 in broker.conf",
				"addr", ln.Addr().String(), "advertised", net.JoinHostPort(host, strconv.Itoa(int(port))))
		}
		run := func(context.Context) error { return srv.Serve(ln) }
		if b := p.broker; kcfg.Cluster != nil {
			run = func(ctx context.Context) error {
				go reregisterOnChange(ctx, b, local)
				return srv.Serve(ln)
			}
		}
		return service{
			name: "kafka",
			run:  run,
			stop: func(context.Context) error {
				if p.broker != nil {
					p.broker.SetKafka(nil)
				}
				err := srv.Close()
				if peers, ok := kcfg.Peers.(*kafkaPeers); ok {
					peers.close()
				}
				return err
			},
		}, nil
	}
}

// kafkaCleanerService cleans the compacted Kafka topics of a broker whose
// door is off (a slave, or a master without kafkaListen), so that its
// copies are there, and its CommitLog held for them, when it becomes a
// master with a door (kafka.Cleaner).
func (p *parts) kafkaCleanerService() (service, error) {
	if p.core == nil {
		return service{name: "kafka"}, nil
	}
	cl, err := kafka.NewCleaner(kafka.Config{DataDir: p.cfg.StorePathRootDir, FS: storeFS, CompactionInterval: p.cfg.KafkaCompactionInterval},
		p.core, p.log.With("component", "kafka-cleaner"))
	if err != nil {
		return service{}, err
	}
	return service{name: "kafka-cleaner", run: cl.Run, stop: func(context.Context) error { return cl.Close() }}, nil
}

// kafkaLocalGroup reports the member's replication epoch and, on a
// master, its in-sync replicas by brokerId (its own, 0, first), for the
// Kafka door's Metadata and its registration.
func (p *parts) kafkaLocalGroup() func() kafka.LocalGroup {
	state := p.replicationState
	return func() kafka.LocalGroup {
		if state == nil {
			return kafka.LocalGroup{Epoch: -1}
		}
		s := state()
		l := kafka.LocalGroup{Epoch: -1}
		if s.Epoch > 0 && s.Epoch <= math.MaxInt32 {
			l.Epoch = int32(s.Epoch)
		}
		if s.Role != replication.RoleSlave {
			l.InSync = []int64{0}
			for _, r := range s.Replicas {
				if r.InSync {
					l.InSync = append(l.InSync, r.BrokerID)
				}
			}
		}
		return l
	}
}

// reregisterOnChange registers again soon whenever the member's epoch or
// in-sync set changes (checked every second), so that the other members'
// Kafka Metadata follows within seconds rather than a registration period.
func reregisterOnChange(ctx context.Context, b *broker.Broker, local func() kafka.LocalGroup) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := fmt.Sprint(local())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := fmt.Sprint(local()); now != last {
			last = now
			b.RegisterSoon()
		}
	}
}

// maxRegisteredQueues bounds the queues of one group's topic the Kafka
// view takes from the NameServers (brokers allow at most 1024): a group
// registering more is left out of the topic's partitions.
const maxRegisteredQueues = 1 << 16

// kafkaRefusal follows the NameServers' answers about the Kafka door: a
// node id taken by another broker leaves the door out of the cluster
// (logged at Error, with the fix); the door then serves alone.
type kafkaRefusal struct {
	log    *slog.Logger
	reason atomic.Pointer[string]
}

func (r *kafkaRefusal) answer(ext map[string]string) {
	now := ext["kafkaRefused"]
	old := r.reason.Swap(&now)
	switch {
	case now != "" && (old == nil || *old != now):
		r.log.Error("Kafka door left out of the cluster by the NameServer: it serves as a broker alone until its kafkaNodeId is unique", "reason", now)
	case now == "" && old != nil && *old != "":
		r.log.Info("Kafka door taken into the cluster by the NameServer")
	}
}

func (r *kafkaRefusal) refused() bool {
	p := r.reason.Load()
	return p != nil && *p != ""
}

// kafkaCluster is the Kafka door's view of the cluster: the NameServers'
// GET_KAFKA_CLUSTER answer, asked over the broker's connections; empty
// while the door is refused.
type kafkaCluster struct {
	b       *broker.Broker
	cluster string
	refusal *kafkaRefusal
}

func (k kafkaCluster) KafkaCluster(ctx context.Context) (kafka.ClusterView, error) {
	if k.refusal.refused() {
		return kafka.ClusterView{}, nil
	}
	var kc namesrv.KafkaCluster
	err := k.b.AskNamesrv(ctx, func(c *remoting.Client) (err error) {
		kc, err = namesrv.GetKafkaCluster(ctx, c, k.cluster)
		return err
	})
	if err != nil {
		return kafka.ClusterView{}, err
	}
	return kafkaView(kc), nil
}

// errAskNext has AskNamesrv go on to the next NameServer.
var errAskNext = errors.New("ask the next NameServer too")

// KafkaClusterEach asks every NameServer (kafka.ClusterEach): those the
// broker reaches are asked at once, each answer bounded by ctx; the
// connections are dialled one after another (most are open already).
func (k kafkaCluster) KafkaClusterEach(ctx context.Context) ([]kafka.ClusterView, error) {
	if k.refusal.refused() {
		return []kafka.ClusterView{{}}, nil
	}
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		views  []kafka.ClusterView
		askErr error
	)
	err := k.b.AskNamesrv(ctx, func(c *remoting.Client) error {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kc, err := namesrv.GetKafkaCluster(ctx, c, k.cluster)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				askErr = err
				return
			}
			views = append(views, kafkaView(kc))
		}()
		return errAskNext
	})
	wg.Wait()
	if len(views) > 0 {
		return views, nil
	}
	if askErr != nil {
		return nil, askErr
	}
	return nil, err
}

// kafkaView is the door's view of one NameServer's answer.
func kafkaView(kc namesrv.KafkaCluster) kafka.ClusterView {
	v := kafka.ClusterView{Topics: make(map[string][]kafka.TopicGroup, len(kc.Topics))}
	for _, b := range kc.Brokers {
		if b.KafkaAddr == "" { // a replica without a door
			v.Brokers = append(v.Brokers, kafka.ClusterBroker{Group: b.BrokerName, BrokerID: b.BrokerID, NodeID: b.NodeID,
				Epoch: b.Epoch, InSync: b.InSync, Addr: b.Addr, Rack: b.Rack})
			continue
		}
		host, port, err := net.SplitHostPort(b.KafkaAddr)
		n, perr := strconv.ParseUint(port, 10, 16)
		if err != nil || perr != nil || n == 0 {
			continue // not an address a client could dial
		}
		v.Brokers = append(v.Brokers, kafka.ClusterBroker{Group: b.BrokerName, BrokerID: b.BrokerID, NodeID: b.NodeID,
			Host: host, Port: int32(n), Epoch: b.Epoch, InSync: b.InSync, Addr: b.Addr, Rack: b.Rack})
	}
	for topic, groups := range kc.Topics {
		for _, g := range groups {
			if g.ReadQueueNums > 0 && g.ReadQueueNums <= maxRegisteredQueues {
				v.Topics[topic] = append(v.Topics[topic], kafka.TopicGroup{Group: g.BrokerName, Queues: int32(g.ReadQueueNums)})
			}
		}
	}
	return v
}

// kafkaAdvertised is the host and port Metadata gives Kafka clients:
// kafkaAdvertisedListen, else brokerIP1 or the listen host (127.0.0.1 for
// all interfaces), with the listener's port (0: the one bound).
func kafkaAdvertised(advertised, brokerIP1, listen string) (string, int32, error) {
	hostPort, what := listen, "kafkaListen"
	if advertised != "" {
		hostPort, what = advertised, "kafkaAdvertisedListen"
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: %w", what, hostPort, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: port: %w", what, hostPort, err)
	}
	if advertised == "" {
		switch {
		case brokerIP1 != "":
			host = brokerIP1
		case host == "" || host == "0.0.0.0" || host == "::":
			host = "127.0.0.1"
		}
	}
	return host, int32(n), nil
}

func kafkaAuthDescription(acl bool) string {
	if acl {
		return "SASL PLAIN/SCRAM-SHA-256/SCRAM-SHA-512 as plain_acl.yml accounts, ACL checked"
	}
	return "none (aclEnable=false)"
}

// kafkaAccounts is the ACL as the Kafka door asks it (kafka.Accounts).
type kafkaAccounts struct{ a *acl.Authorizer }

func (k kafkaAccounts) Trusted(remote net.Addr) bool { return k.a.Trusted(remote) }
func (k kafkaAccounts) Authenticate(user, password string) bool {
	return k.a.Authenticate(user, password) != nil
}
func (k kafkaAccounts) Secret(user string) (string, bool) {
	if acct := k.a.Account(user); acct != nil {
		return acct.SecretKey(), true
	}
	return "", false
}
func (k kafkaAccounts) Admin(user string) bool {
	acct := k.a.Account(user)
	return acct != nil && acct.Admin
}
func (k kafkaAccounts) MayTopic(user, topic string, need kafka.Perm) bool {
	acct := k.a.Account(user)
	return acct != nil && acct.MayTopic(topic, aclPerm(need))
}
func (k kafkaAccounts) MayGroup(user, group string, need kafka.Perm) bool {
	acct := k.a.Account(user)
	return acct != nil && acct.MayGroup(group, aclPerm(need))
}

func aclPerm(p kafka.Perm) acl.Perm {
	switch p {
	case kafka.PermPub:
		return acl.Pub
	case kafka.PermSub:
		return acl.Sub
	}
	return acl.Any
}

// advertisesLoopbackToNetwork reports whether a Kafka listener bound at
// bound, reachable beyond this host, advertises a loopback host: what
// `--kafka-listen :9092` without kafkaAdvertisedListen or brokerIP1 does.
func advertisesLoopbackToNetwork(bound net.Addr, host string) bool {
	if loopback(bound) {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// kafkaHooks tell the broker (LIST_KAFKA, the consumer connections of the
// RocketMQ admin requests) about srv's groups and connections.
func kafkaHooks(srv *kafka.Server) *broker.KafkaHooks {
	return &broker.KafkaHooks{
		Info:   func() any { return srv.Info() },
		Counts: srv.GroupCounts,
		Members: func(group string) []broker.KafkaMember {
			var out []broker.KafkaMember
			for _, m := range srv.GroupMembers(group) {
				km := broker.KafkaMember{ID: m.MemberID, Host: m.Host}
				for _, a := range m.Assignment {
					km.Topics = append(km.Topics, a.Topic)
				}
				out = append(out, km)
			}
			return out
		},
	}
}
