package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/replication"
	"github.com/keelmq/keel/internal/store"
)

// Replication wiring (docs/replication.md): a master (ASYNC_MASTER,
// SYNC_MASTER) listens on its HA address and streams its CommitLog to
// the slaves that connect; a SLAVE dials haMasterAddress (or, without
// it, the master's haServerAddr the NameServer answers its registration
// with) and copies it.

const (
	listenHA     = "replication"
	haListenFlag = "--ha-listen or haListenPort in broker.conf"
)

// haListenAddr is a master's replication address: --ha-listen if given,
// else the broker listener's host on haListenPort (listenPort+1 when 0,
// or the --broker-listen port + 1). A slave does not listen ("").
func haListenAddr(b *config.Broker, haFlag, brokerListen string) (string, error) {
	if b.BrokerRole == config.Slave {
		return "", nil
	}
	if haFlag != "" {
		return haFlag, nil
	}
	host, port, err := net.SplitHostPort(brokerListen)
	if err != nil {
		return "", fmt.Errorf("broker listen address %q: %w", brokerListen, err)
	}
	p := b.HAListenPort
	if p == 0 {
		n, err := strconv.Atoi(port)
		if err != nil {
			return "", fmt.Errorf("broker listen address %q: port %q", brokerListen, port)
		}
		if n == 0 {
			return net.JoinHostPort(host, "0"), nil
		}
		p = n + 1
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// replicationStarter starts the master's HA service or the slave's
// replication, after the store and before the broker (a master's new
// epoch is on disk before it takes a send). It sets the broker's send
// gate.
func (p *parts) replicationStarter(haAddr string) starter {
	return func() (service, error) {
		b := p.cfg
		log := p.log.With("component", "replication")
		if b.BrokerRole == config.Slave {
			if b.HAMasterAddress == "" && len(p.namesrvAddrs) == 0 {
				return service{}, errors.New("brokerRole=SLAVE needs haMasterAddress (the master's host:haListenPort) in broker.conf, or a NameServer (-n) to learn it from")
			}
			sc := replication.SlaveConfig{Store: p.store, DataDir: b.StorePathRootDir,
				BrokerName: b.BrokerName, BrokerID: b.BrokerID, MasterAddr: b.HAMasterAddress,
				SyncFlush: b.FlushDiskType == config.SyncFlush, LocalOffsets: p.replicaOffsets, Logger: log,
				MaxFrameBytes: replicationFrameBytes(p.store)}
			if b.HAMasterAddress == "" {
				// A lost link asks the NameServers again (the master may
				// have moved); the broker is started after this.
				sc.OnLinkLost = func() {
					if f := p.registerSoon.Load(); f != nil {
						(*f)()
					}
				}
			}
			s, err := replication.NewSlave(sc)
			if err != nil {
				return service{}, err
			}
			p.sendGate = func() store.PutResult {
				return store.PutResult{Status: store.PutServiceNotAvailable,
					Err: fmt.Errorf("broker %s id %d is a slave (brokerRole=SLAVE): send to its master, brokerId 0", b.BrokerName, b.BrokerID)}
			}
			if b.HAMasterAddress == "" {
				// RocketMQ's way: the NameServer's answer to the slave's
				// registration names the master's haServerAddr.
				p.onMasterAddress = func(_, ha string) { s.SetMasterAddr(ha) }
			}
			p.setReplicationState(s.State)
			log.Info("replication: slave", "master", cmp.Or(b.HAMasterAddress, "(from the NameServer)"), "epochs", s.History())
			return service{name: "replication", run: s.Run}, nil
		}
		m, err := replication.NewMaster(replication.MasterConfig{Store: p.store, DataDir: b.StorePathRootDir,
			BrokerName: b.BrokerName, Sync: b.BrokerRole == config.SyncMaster,
			MinInSyncReplicas: b.MinInSyncReplicas, AckTimeout: b.ReplicaAckTimeout,
			CatchUpBytesPerSecond: b.ReplicaCatchUpBytesPerSecond, OnReplicaOffsets: p.mergeReplicaOffsets, Logger: log,
			MaxFrameBytes: replicationFrameBytes(p.store)})
		if err != nil {
			return service{}, err
		}
		ln, err := p.listen(listenHA, haAddr)
		if err != nil {
			return service{}, err
		}
		p.haBound = ln.Addr()
		p.sendGate = m.CheckSend
		p.setReplicationState(func() replication.State { return m.State(time.Now()) })
		log.Info("replication listening", "addr", ln.Addr().String(), "role", b.BrokerRole)
		return service{name: "replication", run: func(ctx context.Context) error { return m.Serve(ctx, ln) }}, nil
	}
}

// haAdvertised is the haServerAddr registered with the NameServers: the
// advertised broker host on the bound HA port ("" for a slave).
func (p *parts) haAdvertised(adv string) string {
	if p.haBound == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(adv)
	if err != nil {
		return ""
	}
	_, port, err := net.SplitHostPort(p.haBound.String())
	if err != nil {
		return ""
	}
	return net.JoinHostPort(host, port)
}

// replicationFrameBytes bounds a replication frame: a DATA frame holds one
// chunk or one record larger than a chunk, so the largest record the
// store takes (an AMQP message up to amqpMaxMessageSize) with room for
// the frame's own fields.
func replicationFrameBytes(st *store.Store) int {
	return max(replication.DefaultMaxFrameBytes, st.MaxRecordBodyBytes()+1<<20)
}
