package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/amqp"
	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/controller"
	"github.com/keelmq/keel/internal/metrics"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/replication"
	"github.com/keelmq/keel/internal/store"
)

// Controller mode (enableControllerMode=true, docs/replication.md
// "Controller"): the broker's role comes from the controllers. The
// process runs the controller Agent (internal/controller) for its whole
// life and the broker's services in rounds, one per role: it starts
// fenced (a replica following nobody, no writes, not registered with the
// NameServers), and each time a view from the controller names a new
// role it stops every service of the round (front doors, replication,
// store) and starts them again in the new role, in lifecycle.go's order:
// master at the view's epoch (brokerId 0, the epoch appended to its
// epoch history and registered as masterEpoch; the store's open
// recomputes every queue's next offset from its log), or slave of the
// view's master (its replication truncates what the master never
// confirmed). The listeners bind again at the ports of the first round.
// The Kafka door is a master's door in a master round and, with
// kafkaBrokerRack set, a consumer-only door (kafka.Config.Follower) in a
// slave round; a fenced round has none. A promotion or demotion thus
// replaces the door with the other kind: the old one is closed with its
// connections, its groups and its transaction tasks.

type roleKind int

const (
	roleFenced roleKind = iota
	roleMaster
	roleSlave
)

func (k roleKind) String() string {
	switch k {
	case roleMaster:
		return "master"
	case roleSlave:
		return "slave"
	}
	return "fenced"
}

// role is what one round runs as.
type role struct {
	kind     roleKind
	epoch    uint32 // master: the epoch it writes at; slave: the epoch of its master
	masterHA string // slave: the master's replication address
	view     controller.GroupView
}

// roleLog is the replication side of the running round, for the agent.
type roleLog interface {
	log() (lastEpoch uint32, logEnd int64)
	fence(epoch uint32)
}

type masterLog struct {
	m      *replication.Master
	st     *store.Store
	leased bool
}

func (r masterLog) log() (uint32, int64) { return r.m.Epoch(), r.st.Offset(store.Written) }
func (r masterLog) fence(e uint32)       { r.m.Fence(e) }

// leaseEpoch is the epoch a master asks a lease at: an ASYNC_MASTER's
// (it acknowledges only under a lease), 0 for a SYNC_MASTER.
func (r masterLog) leaseEpoch() uint32 {
	if r.leased {
		return r.m.Epoch()
	}
	return 0
}

type slaveLog struct {
	s  *replication.Slave
	st *store.Store
}

func (r slaveLog) log() (uint32, int64) {
	return r.s.History().Last().Epoch, r.st.Offset(store.Written)
}
func (r slaveLog) fence(e uint32) { r.s.Fence(e) }

// frozenLog is a round's log once its services stopped: nothing writes
// until the next round starts.
type frozenLog struct {
	epoch uint32
	end   int64
}

func (r frozenLog) log() (uint32, int64) { return r.epoch, r.end }
func (frozenLog) fence(uint32)           {}

// controlled runs a broker in controller mode.
type controlled struct {
	o     *options
	cfg   *config.Broker
	log   *slog.Logger
	agent *controller.Agent

	mu      sync.Mutex
	cur     roleLog // nil before the first round's replication started
	running role
	next    *role              // set when a view ends the round
	cancel  context.CancelFunc // ends the running round
	changes uint64             // rounds started in a new role, for /metrics
	// amqp is the running master's AMQP door (nil: none), told when this
	// master is replaced.
	amqp atomic.Pointer[amqp.Server]
	// lostRecords and lostBytes count what was cut below what this
	// broker had shown (cutLost), since the process started.
	lostRecords, lostBytes atomic.Uint64
}

// stats are the broker's controller-mode figures for /metrics.
func (c *controlled) stats() metrics.ControlledStats {
	c.mu.Lock()
	r, changes := c.running, c.changes
	var leased, held bool
	if m, ok := c.cur.(masterLog); ok && m.leased {
		leased, held = true, m.m.LeaseHeld(time.Now())
	}
	c.mu.Unlock()
	return metrics.ControlledStats{Role: r.kind.String(), MasterEpoch: r.epoch, PromisedEpoch: c.agent.FencedEpoch(),
		Fences: c.agent.Fences(), RoleChanges: changes, Leased: leased, LeaseHeld: held,
		LostRecords: c.lostRecords.Load(), LostBytes: c.lostBytes.Load()}
}

func (c *controlled) logEnd() (uint32, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return 0, 0
	}
	return c.cur.log()
}

func (c *controlled) fence(epoch uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return errors.New("the broker's log is not open yet")
	}
	c.cur.fence(epoch)
	return nil
}

// leaseEpoch is the agent's Lease: the epoch the running ASYNC_MASTER
// writes at (0: no lease wanted).
func (c *controlled) leaseEpoch() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.cur.(masterLog); ok {
		return m.leaseEpoch()
	}
	return 0
}

// onLease is the agent's OnLease: a grant at the running master's epoch
// lets it acknowledge until until.
func (c *controlled) onLease(epoch uint32, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.cur.(masterLog); ok && m.leased && m.m.Epoch() == epoch {
		m.m.SetLease(until)
	}
}

func (c *controlled) setCur(r roleLog) {
	c.mu.Lock()
	c.cur = r
	c.mu.Unlock()
	// A fence promised while the round was being built reached the
	// previous round's log only: apply the promise to this one too.
	if r != nil {
		r.fence(c.agent.FencedEpoch())
	}
	if m, ok := r.(masterLog); ok && m.leased {
		c.agent.HeartbeatNow() // the first lease, without waiting a heartbeat interval
	}
}

// onView decides the role a newer view asks for and, if it differs from
// the running one, ends the round (a replaced master stops acknowledging
// at once, before its services stop).
func (c *controlled) onView(v controller.GroupView) {
	// The agent's lock is taken before c.mu, never under it: the agent
	// calls fence and logEnd holding its own.
	me, promised := c.agent.ReplicaID(), c.agent.FencedEpoch()
	if me == 0 || v.MasterID == 0 {
		return // no master yet
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var want role
	switch {
	case v.MasterID == me:
		lastEpoch := uint32(0)
		if c.cur != nil {
			lastEpoch, _ = c.cur.log()
		}
		if v.MasterEpoch <= lastEpoch || v.MasterEpoch < promised {
			// A view of an election from before this process started
			// (its epoch is in the log's history), or one a newer fence
			// overtook: wait for the next election.
			c.log.Info("controller: not taking the master role of an old view", "epoch", v.MasterEpoch, "log_epoch", lastEpoch)
			return
		}
		want = role{kind: roleMaster, epoch: v.MasterEpoch, view: v}
	default:
		want = role{kind: roleSlave, epoch: v.MasterEpoch, masterHA: v.MasterHAAddr, view: v}
	}
	run := c.running
	if c.next != nil {
		run = *c.next
	}
	if run.kind == want.kind && (want.kind == roleSlave && run.masterHA == want.masterHA || want.kind == roleMaster && run.epoch == want.epoch) {
		return
	}
	if c.running.kind == roleMaster && c.cur != nil && want.epoch > c.running.epoch {
		c.cur.fence(want.epoch)
		if srv := c.amqp.Load(); srv != nil {
			// Before the services stop: the clients learn why.
			srv.CloseConnections(wire.ConnectionForced, fmt.Sprintf("CONNECTION_FORCED - broker %s was replaced as master (epoch %d): the group's master is at epoch %d; connect to it",
				c.cfg.BrokerName, c.running.epoch, want.epoch))
		}
	}
	c.log.Info("controller: role change", "from", c.running.kind, "to", want.kind, "epoch", want.epoch, "master_ha", want.masterHA)
	c.next = &want
	if c.cancel != nil {
		c.cancel()
	}
}

// runControlled runs the broker in controller mode until ctx ends or a
// round fails.
func runControlled(ctx context.Context, o *options, cfg *config.Broker, log *slog.Logger, brokerListen, haAddr string, namesrvAddrs []string) error {
	ls, err := bindListeners(listenSpec{listenBroker, brokerListen, brokerListenFlag},
		listenSpec{listenHA, haAddr, haListenFlag},
		listenSpec{listenHTTP, cfg.HTTPListen, httpListenFlag}, listenSpec{listenAMQP, cfg.AMQPListen, amqpListenFlag},
		listenSpec{listenKafka, cfg.KafkaListen, kafkaListenFlag},
		listenSpec{listenAMQPManagement, cfg.AMQPManagementListen, amqpManagementListenFlag})
	if err != nil {
		return err
	}
	defer ls.closeAll()
	if err := checkHTTPExposure(cfg, ls); err != nil {
		return err
	}
	if err := checkAMQPManagementExposure(cfg, ls); err != nil {
		return err
	}
	if err := checkHAExposure(cfg, ls, haAddr); err != nil {
		return err
	}
	addrs := map[string]string{}
	for name, ln := range ls {
		addrs[name] = ln.Addr().String()
	}
	adv, err := advertisedAddr(cfg, brokerListen, ls[listenBroker].Addr(), log)
	if err != nil {
		return err
	}
	haAdv := (&parts{cfg: cfg, haBound: ls[listenHA].Addr()}).haAdvertised(adv)
	if err := os.MkdirAll(cfg.StorePathRootDir, 0o755); err != nil {
		return err
	}
	c := &controlled{o: o, cfg: cfg, log: log}
	c.agent, err = controller.OpenAgent(controller.AgentConfig{Group: cfg.BrokerName, Dir: cfg.StorePathRootDir, Addr: adv, HAAddr: haAdv,
		AMQPAddr:    amqpAdvertised(adv, addrs[listenAMQP]),
		Controllers: cfg.ControllerAddrs(), Log: c.logEnd, Fence: c.fence, OnView: c.onView, Lease: c.leaseEpoch, OnLease: c.onLease,
		Logger: log.With("component", "controller-agent")})
	if err != nil {
		return err
	}
	log.Info("keel broker (controller mode)", "version", version, "data_dir", cfg.StorePathRootDir, "controllers", cfg.ControllerAddrs(),
		"advertised", adv, "ha", haAdv, "incarnation", c.agent.Incarnation())

	// The agent outlives the rounds; if it gives up (another cluster, a
	// copied store) the process stops.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var agentErr error
	agentDone := make(chan struct{})
	var agentOnce sync.Once
	startAgent := func() {
		agentOnce.Do(func() {
			go func() {
				defer close(agentDone)
				if err := c.agent.Run(ctx); err != nil {
					agentErr = err
					log.Error("controller agent stopped; stopping the broker", "err", err)
					stop()
				}
			}()
		})
	}
	defer func() {
		stop()
		agentOnce.Do(func() { close(agentDone) })
		<-agentDone
	}()

	first := true
	lastCut := int64(-1) // the offset of the last cut below what was shown (cutLost)
	for {
		c.mu.Lock()
		r := c.running
		if c.next != nil {
			r, c.next = *c.next, nil
			if r.kind != c.running.kind || r.epoch != c.running.epoch || r.masterHA != c.running.masterHA {
				c.changes++
			}
		}
		c.running = r
		rctx, cancel := context.WithCancel(ctx)
		c.cancel = cancel
		c.mu.Unlock()

		rcfg := *cfg
		rcfg.HTTPListen = addrs[listenHTTP]
		// The Kafka node id stays with the replica whatever its role
		// (its brokerId does not: 0 as master).
		rcfg.KafkaNodeID = kafkaNodeOf(cfg.KafkaNodeID, c.agent.ReplicaID())
		if rcfg.KafkaNodeID > math.MaxInt32 {
			cancel()
			return fmt.Errorf("kafkaNodeId %d plus replica id %d is above 2147483647, the largest Kafka node id", cfg.KafkaNodeID, c.agent.ReplicaID())
		}
		amqpAddr, kafkaAddr, amqpMgmtAddr := addrs[listenAMQP], addrs[listenKafka], addrs[listenAMQPManagement]
		p := &parts{cfg: &rcfg, log: log, repairCorruption: o.repairCorruption, brokerSide: c.agent, controlledStats: c.stats}
		if first {
			p.listeners = ls
		}
		if r.kind == roleMaster {
			p.amqpStarted = func(srv *amqp.Server) { c.amqp.Store(srv) }
			rcfg.BrokerRole, rcfg.BrokerID = cfg.BrokerRole, 0 // SYNC_MASTER or ASYNC_MASTER
			p.namesrvAddrs, p.masterEpoch = namesrvAddrs, r.epoch
		} else {
			rcfg.BrokerRole, rcfg.BrokerID = config.Slave, max(int64(c.agent.ReplicaID()), 1)
			slaveKafka := ""
			if r.kind == roleSlave {
				p.namesrvAddrs = namesrvAddrs
				if cfg.KafkaBrokerRack != "" {
					// A slave with a rack: its Kafka door serves the
					// consumers of that rack (follower fetching), up to
					// what its store shows, which is what the master
					// confirmed.
					slaveKafka = kafkaAddr
				}
			}
			amqpAddr, kafkaAddr, amqpMgmtAddr = "", slaveKafka, ""
			if first {
				for _, name := range []string{listenHA, listenKafka, listenAMQPManagement} {
					if ln := ls[name]; ln != nil {
						ln.Close()
						delete(ls, name)
					}
				}
			}
		}
		first = false
		repl := c.replicationStarter(p, r, addrs[listenHA], startAgent)
		starters := p.roleStarters(c.o, addrs[listenBroker], amqpAddr, kafkaAddr, amqpMgmtAddr, repl)
		if r.kind == roleMaster {
			starters = append(starters, c.inSyncStarter(p, r))
		} else if a := addrs[listenAMQP]; a != "" {
			starters = append(starters, c.amqpRefusalStarter(p, r, a))
		}
		log.Info("controller mode: starting", "role", r.kind, "epoch", r.epoch, "broker_id", rcfg.BrokerID, "master_ha", r.masterHA)
		err := runServices(rctx, log, starters...)
		cancel()
		c.amqp.Store(nil)
		c.mu.Lock()
		if c.cur != nil {
			e, end := c.cur.log()
			c.cur = frozenLog{epoch: e, end: end}
		}
		switched := c.next != nil
		c.mu.Unlock()
		var shown *replication.ShownTruncation
		if errors.As(err, &shown) && ctx.Err() == nil {
			// The services and the store are stopped: cut the log where
			// the group's master agrees with it, then follow again.
			if shown.Offset == lastCut {
				return fmt.Errorf("controller mode: the cut of the log at %d did not take: %w", lastCut, err)
			}
			if terr := c.cutLost(shown); terr != nil {
				return errors.Join(err, terr)
			}
			lastCut = shown.Offset
			if !switched {
				c.mu.Lock()
				c.next = &r
				c.mu.Unlock()
			}
			continue
		}
		if ctx.Err() != nil {
			select {
			case <-agentDone:
				if agentErr != nil {
					return errors.Join(fmt.Errorf("controller agent: %w", agentErr), err)
				}
			default:
			}
		}
		if ctx.Err() != nil || !switched {
			return logStopped(log, err, true)
		}
		if err != nil {
			log.Warn("controller mode: the round stopped with an error; starting the next role", "err", err)
		}
	}
}

// cutLost cuts a stopped store below what it showed (store.TruncateClosed;
// the next round's open finishes it): records this broker acknowledged
// as an ASYNC_MASTER that no replica got before the failover. They are
// lost; the log and /metrics say how many.
func (c *controlled) cutLost(t *replication.ShownTruncation) error {
	if err := store.TruncateClosed(nil, c.cfg.StorePathRootDir, t.Offset); err != nil {
		return err
	}
	c.lostRecords.Add(uint64(t.Records))
	c.lostBytes.Add(uint64(t.LogEnd - t.Offset))
	c.log.Error("controller mode: cutting records this broker acknowledged as ASYNC_MASTER that the group's new master does not hold: they are lost",
		"records", t.Records, "bytes", t.LogEnd-t.Offset, "offset", t.Offset, "log_end", t.LogEnd)
	return nil
}

// kafkaNodeOf is a replica's Kafka node id in controller mode: its
// replica id, plus kafkaNodeId when that is set (a base, so that groups
// sharing a NameServer have distinct node ids).
func kafkaNodeOf(base int64, id controller.ReplicaID) int64 {
	return max(base, 0) + int64(id)
}

// replicationStarter is the round's replication: a master at the
// controller's epoch on the HA address, or a slave of the view's master
// (fenced: of nobody yet), keeping the agent's promise.
func (c *controlled) replicationStarter(p *parts, r role, haAddr string, started func()) starter {
	return func() (service, error) {
		b := p.cfg
		log := p.log.With("component", "replication")
		prot, err := p.haProtection(log)
		if err != nil {
			return service{}, err
		}
		if r.kind != roleMaster {
			s, err := replication.NewSlave(replication.SlaveConfig{Store: p.store, DataDir: b.StorePathRootDir,
				BrokerName: b.BrokerName, BrokerID: b.BrokerID, MasterAddr: r.masterHA, FencedEpoch: c.agent.FencedEpoch(),
				SyncFlush: b.FlushDiskType == config.SyncFlush, LocalOffsets: p.replicaOffsets,
				Secret: prot.secret, TLS: prot.client, Logger: log, MaxFrameBytes: replicationFrameBytes(p.store),
				// An ASYNC_MASTER group: a former master may hold records it
				// acknowledged that no replica got; they are cut (lost).
				TruncateShown: c.cfg.BrokerRole == config.AsyncMaster})
			if err != nil {
				return service{}, err
			}
			c.setCur(slaveLog{s: s, st: p.store})
			started()
			why := fmt.Sprintf("broker %s is fenced: the controller has not named it master (controller mode); send to the group's master, brokerId 0", b.BrokerName)
			if r.kind == roleSlave {
				why = fmt.Sprintf("broker %s is a slave of the master at epoch %d (controller mode): send to its master, brokerId 0", b.BrokerName, r.epoch)
			}
			p.sendGate = func() store.PutResult {
				return store.PutResult{Status: store.PutServiceNotAvailable, Err: errors.New(why)}
			}
			p.setReplicationState(s.State)
			log.Info("replication: slave (controller mode)", "role", r.kind, "master", r.masterHA, "epochs", s.History(), "promised_epoch", c.agent.FencedEpoch())
			return service{name: "replication", run: s.Run}, nil
		}
		// An ASYNC_MASTER acknowledges without its slaves, so only while
		// it holds a lease from the controllers (Leased).
		leased := b.BrokerRole == config.AsyncMaster
		m, err := replication.NewMaster(replication.MasterConfig{Store: p.store, DataDir: b.StorePathRootDir,
			BrokerName: b.BrokerName, Sync: !leased, Leased: leased, Epoch: r.epoch,
			MinInSyncReplicas: b.MinInSyncReplicas, AckTimeout: b.ReplicaAckTimeout,
			CatchUpBytesPerSecond: b.ReplicaCatchUpBytesPerSecond, OnReplicaOffsets: p.mergeReplicaOffsets,
			Secret: prot.secret, TLS: prot.server, Logger: log, MaxFrameBytes: replicationFrameBytes(p.store)})
		if err != nil {
			return service{}, err
		}
		m.SetRequired(requiredOf(r.view, c.agent.ReplicaID()))
		c.setCur(masterLog{m: m, st: p.store, leased: leased})
		started()
		ln, err := p.listen(listenHA, haAddr)
		if err != nil {
			return service{}, err
		}
		p.haBound = ln.Addr()
		p.sendGate = m.CheckSend
		p.setReplicationState(func() replication.State { return m.State(time.Now()) })
		p.epochHistory = m.History
		p.roleMaster = m
		log.Info("replication listening (controller mode: master)", "addr", ln.Addr().String(), "epoch", m.Epoch(),
			"tls", prot.tlsDescription(), "auth", prot.authDescription())
		return service{name: "replication", run: func(ctx context.Context) error { return m.Serve(ctx, ln) }}, nil
	}
}

// requiredOf is the in-sync set of a view without the master me.
func requiredOf(v controller.GroupView, me controller.ReplicaID) []int64 {
	var ids []int64
	for _, m := range v.InSync {
		if m.ID != me {
			ids = append(ids, int64(m.ID))
		}
	}
	return ids
}

// inSyncStarter runs the master's side of the in-sync set: it proposes,
// every half second, the replicas the replication layer has in sync
// (one out of it for less than replicaAckTimeout is kept); until a
// removal commits, confirmations wait for the union of both sets.
func (c *controlled) inSyncStarter(p *parts, r role) starter {
	return func() (service, error) {
		m := p.roleMaster
		me := c.agent.ReplicaID()
		grace := p.cfg.ReplicaAckTimeout
		missing := map[int64]time.Time{} // members of the controller's set out of the replication's, since
		return service{name: "in-sync", run: func(ctx context.Context) error {
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
				v := c.agent.View()
				if v.MasterID != me || v.MasterEpoch != r.epoch {
					continue
				}
				cur := requiredOf(v, me)
				inc := map[int64]uint64{}
				for _, rep := range v.Replicas {
					inc[int64(rep.ID)] = rep.Incarnation
				}
				var now []int64
				for _, id := range m.InSyncIDs() {
					if _, ok := inc[id]; ok && id != int64(me) {
						now = append(now, id)
					}
				}
				// A member out of the replication's in-sync set leaves
				// the controller's only after replicaAckTimeout (a slave
				// reconnecting to a new master, or a short hiccup, does
				// not shrink the set the next election draws from);
				// meanwhile confirmations wait for it.
				for id := range missing {
					if !slices.Contains(cur, id) || slices.Contains(now, id) {
						delete(missing, id)
					}
				}
				for _, id := range cur {
					if slices.Contains(now, id) {
						continue
					}
					since, ok := missing[id]
					if !ok {
						missing[id] = time.Now()
					}
					if !ok || time.Since(since) < grace {
						now = append(now, id)
					}
				}
				slices.Sort(now)
				now = slices.Compact(now)
				slices.Sort(cur)
				if slices.Equal(cur, now) {
					m.SetRequired(cur)
					continue
				}
				union := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(cur), now...))))
				m.SetRequired(union)
				members := []controller.Member{{ID: me, Incarnation: c.agent.Incarnation()}}
				for _, id := range now {
					members = append(members, controller.Member{ID: controller.ReplicaID(id), Incarnation: inc[id]})
				}
				actx, cancel := context.WithTimeout(ctx, 3*time.Second)
				_, err := c.agent.AlterInSync(actx, v.InSyncEpoch, members)
				cancel()
				if err != nil {
					c.log.Warn("controller mode: in-sync change not committed", "in_sync", now, "err", err)
					continue
				}
				m.SetRequired(now)
				c.log.Info("controller mode: in-sync set changed", "from", cur, "to", now)
			}
		}}, nil
	}
}

// controllerHandler answers the controller's requests to the broker
// (fence, role changed) with the agent, and passes every other request
// on.
type controllerHandler struct {
	inner remoting.Handler
	side  controller.BrokerSide
}

func (h controllerHandler) Handle(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	if req.Code == remoting.ReqControllerFence || req.Code == remoting.ReqControllerRoleChanged {
		return controller.ServeBroker(h.side, req)
	}
	return h.inner.Handle(ctx, c, req)
}

func (h controllerHandler) BorrowsBody(code int16) bool { return remoting.BorrowsBody(h.inner, code) }

func (h controllerHandler) RunsInline(req *remoting.Command) bool {
	if req.Code == remoting.ReqControllerFence || req.Code == remoting.ReqControllerRoleChanged {
		return false
	}
	return remoting.RunsInline(h.inner, req)
}

func (h controllerHandler) HandleBurst(ctx context.Context, c *remoting.Conn, reqs, resps []*remoting.Command) {
	remoting.HandleBurst(ctx, h.inner, c, reqs, resps) // RunsInline passed on no controller request
}

// amqpRefusalStarter is the AMQP door of a slave or fenced member: it
// takes connections and answers connection.open with 530 NOT_ALLOWED
// naming the group's master (a client given every member's address then
// tries the next one), instead of a refused socket that says nothing.
func (c *controlled) amqpRefusalStarter(p *parts, r role, addr string) starter {
	return func() (service, error) {
		ln, err := p.listen(listenAMQP, addr)
		if err != nil {
			return service{}, err
		}
		why := fmt.Sprintf("broker %s is fenced (controller mode): it is not the master and does not follow one yet; AMQP is served by the group's master only, connect to its AMQP address",
			p.cfg.BrokerName)
		if r.kind == roleSlave {
			to := "connect to its AMQP address"
			if a := r.view.MasterAMQPAddr; a != "" {
				to = "its AMQP address is " + a
			}
			why = fmt.Sprintf("broker %s is a slave (controller mode): AMQP is served by the group's master only, the broker at %s (master epoch %d); %s",
				p.cfg.BrokerName, r.view.MasterAddr, r.epoch, to)
		}
		log := p.log.With("component", "amqp")
		log.Info("amqp listening to refuse connections: not the master", "addr", ln.Addr().String(), "role", r.kind)
		finished := make(chan error, 1)
		go func() { finished <- amqp.ServeRefusals(ln, func() string { return why }, log) }()
		return service{
			name: "amqp (refusing: not master)",
			run: func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					return nil
				case <-finished:
					return errors.New("amqp refusal listener stopped")
				}
			},
			stop: func(ctx context.Context) error {
				ln.Close() // the port is free for the next round; refusals under way end on their own
				select {
				case err := <-finished:
					return err
				case <-ctx.Done():
					return nil
				}
			},
		}, nil
	}
}

// amqpAdvertised is the AMQP address a member registers with the
// controller (its group's slaves name it to AMQP clients): the host of
// the broker's advertised address and the port the AMQP listener bound
// ("" without one).
func amqpAdvertised(adv, bound string) string {
	if bound == "" {
		return ""
	}
	host, _, err := net.SplitHostPort(adv)
	_, port, err2 := net.SplitHostPort(bound)
	if err != nil || err2 != nil {
		return ""
	}
	return net.JoinHostPort(host, port)
}
