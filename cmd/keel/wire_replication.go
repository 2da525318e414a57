package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/replication"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/tlsconf"
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
// or the --broker-listen port + 1). A slave does not listen (""). An
// unprotected master (neither haAuthSecret nor mutual TLS) whose derived
// address would be reachable beyond this host listens on 127.0.0.1
// instead (loopbackOnly): slaves on this host still connect, and nobody
// else receives the CommitLog; an explicit --ha-listen beyond loopback
// without protection is refused (checkHAExposure).
func haListenAddr(b *config.Broker, haFlag, brokerListen string) (addr string, loopbackOnly bool, err error) {
	if b.BrokerRole == config.Slave {
		return "", false, nil
	}
	if haFlag != "" {
		return haFlag, false, nil
	}
	host, port, err := net.SplitHostPort(brokerListen)
	if err != nil {
		return "", false, fmt.Errorf("broker listen address %q: %w", brokerListen, err)
	}
	if !b.HAProtected() && !loopbackHost(host) {
		host, loopbackOnly = "127.0.0.1", true
	}
	p := b.HAListenPort
	if p == 0 {
		n, err := strconv.Atoi(port)
		if err != nil {
			return "", false, fmt.Errorf("broker listen address %q: port %q", brokerListen, port)
		}
		if n == 0 {
			return net.JoinHostPort(host, "0"), loopbackOnly, nil
		}
		p = n + 1
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), loopbackOnly, nil
}

// loopbackHost reports whether a listen host reaches this machine only.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// replicationStarter starts the master's HA service or the slave's
// replication, after the store and before the broker (a master's new
// epoch is on disk before it takes a send). It sets the broker's send
// gate.
func (p *parts) replicationStarter(haAddr string) starter {
	return func() (service, error) {
		b := p.cfg
		log := p.log.With("component", "replication")
		prot, err := p.haProtection(log)
		if err != nil {
			return service{}, err
		}
		if b.BrokerRole == config.Slave {
			if b.HAMasterAddress == "" && len(p.namesrvAddrs) == 0 {
				return service{}, errors.New("brokerRole=SLAVE needs haMasterAddress (the master's host:haListenPort) in broker.conf, or a NameServer (-n) to learn it from")
			}
			sc := replication.SlaveConfig{Store: p.store, DataDir: b.StorePathRootDir,
				BrokerName: b.BrokerName, BrokerID: b.BrokerID, MasterAddr: b.HAMasterAddress,
				SyncFlush: b.FlushDiskType == config.SyncFlush, LocalOffsets: p.replicaOffsets,
				Secret: prot.secret, TLS: prot.client, Logger: log, MaxFrameBytes: replicationFrameBytes(p.store)}
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
			log.Info("replication: slave", "master", cmp.Or(b.HAMasterAddress, "(from the NameServer)"), "epochs", s.History(),
				"tls", prot.tlsDescription(), "auth", prot.authDescription())
			return service{name: "replication", run: s.Run}, nil
		}
		m, err := replication.NewMaster(replication.MasterConfig{Store: p.store, DataDir: b.StorePathRootDir,
			BrokerName: b.BrokerName, Sync: b.BrokerRole == config.SyncMaster,
			MinInSyncReplicas: b.MinInSyncReplicas, AckTimeout: b.ReplicaAckTimeout,
			CatchUpBytesPerSecond: b.ReplicaCatchUpBytesPerSecond, OnReplicaOffsets: p.mergeReplicaOffsets,
			Secret: prot.secret, TLS: prot.server, Logger: log, MaxFrameBytes: replicationFrameBytes(p.store)})
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
		p.epochHistory = m.History
		log.Info("replication listening", "addr", ln.Addr().String(), "role", b.BrokerRole,
			"tls", prot.tlsDescription(), "auth", prot.authDescription(), "reach", reach(ln.Addr()))
		return service{name: "replication", run: func(ctx context.Context) error { return m.Serve(ctx, ln) }}, nil
	}
}

// haAdvertised is the haServerAddr registered with the NameServers (and
// the HA address a controller-mode broker registers with the
// controllers): haAdvertisedAddress when set, else the advertised broker
// host on the bound HA port, or the bound address when it is a loopback
// one ("" for a slave).
func (p *parts) haAdvertised(adv string) string {
	if p.haBound == nil {
		return ""
	}
	if p.cfg != nil && p.cfg.HAAdvertisedAddress != "" {
		return p.cfg.HAAdvertisedAddress
	}
	host, _, err := net.SplitHostPort(adv)
	if err != nil {
		return ""
	}
	bhost, port, err := net.SplitHostPort(p.haBound.String())
	if err != nil {
		return ""
	}
	if loopbackHost(bhost) {
		host = bhost
	}
	return net.JoinHostPort(host, port)
}

// haProtections are what the replication link of this broker requires of
// its peer (internal/replication/auth.go): the group's shared secret, and
// the TLS configurations of the link's two ends when tlsMode is on.
type haProtections struct {
	secret         []byte
	server, client *tls.Config
	mutual         bool // certificates checked against haTLSTrustCertPath
}

// haProtection loads the secret (haAuthSecret, or the file
// haAuthSecretFile) and, when tlsMode is on, the listeners' certificate for
// the link (tlsconf.Peer, mutual with haTLSTrustCertPath).
func (p *parts) haProtection(log *slog.Logger) (haProtections, error) {
	b := p.cfg
	var prot haProtections
	switch {
	case b.HAAuthSecret != "":
		prot.secret = []byte(b.HAAuthSecret)
	case b.HAAuthSecretFile != "":
		s, err := readHASecretFile(b.HAAuthSecretFile, log)
		if err != nil {
			return prot, err
		}
		prot.secret = s
	}
	if b.HATLSEnabled() {
		var err error
		prot.server, prot.client, err = tlsconf.Peer(tlsconf.PeerConfig{CertFile: b.TLSServerCertPath,
			KeyFile: b.TLSServerKeyPath, TrustCertFile: b.HATLSTrustCertPath})
		if err != nil {
			return prot, fmt.Errorf("replication TLS: %w", err)
		}
		prot.mutual = b.HATLSTrustCertPath != ""
	}
	return prot, nil
}

// readHASecretFile reads haAuthSecretFile: its content without the final
// line break. A file others may read is used, with a warning.
func readHASecretFile(path string, log *slog.Logger) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("haAuthSecretFile: %w", err)
	}
	s := strings.TrimRight(string(data), "\r\n")
	if len(s) < config.MinHASecretBytes {
		return nil, fmt.Errorf("haAuthSecretFile %s: the secret has %d bytes; at least %d are needed (openssl rand -base64 32 > %s)",
			path, len(s), config.MinHASecretBytes, path)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("haAuthSecretFile can be read by other users: chmod 600 it", "file", path, "mode", fi.Mode().Perm().String())
	}
	return []byte(s), nil
}

func (h haProtections) tlsDescription() string {
	switch {
	case h.server == nil:
		return "off (tlsMode=disabled)"
	case h.mutual:
		return "mutual (certificates checked against haTLSTrustCertPath)"
	}
	return "encrypted, no certificate checked (haTLSTrustCertPath not set)"
}

func (h haProtections) authDescription() string {
	switch {
	case h.secret != nil && h.mutual:
		return "haAuthSecret and mutual TLS"
	case h.secret != nil:
		return "haAuthSecret (challenge-response)"
	case h.mutual:
		return "mutual TLS"
	}
	return "none"
}

// checkHAExposure refuses a replication listener (bound at haAddr)
// reachable beyond this host that authenticates nobody: whoever connected as a slave would
// receive the whole CommitLog. It runs right after the listeners are
// bound, before any service starts.
func checkHAExposure(cfg *config.Broker, ls boundListeners, haAddr string) error {
	ln := ls[listenHA]
	if ln == nil || loopback(ln.Addr()) || cfg.HAProtected() {
		return nil
	}
	ls.closeAll()
	tlsAlone := ""
	if cfg.HATLSEnabled() {
		tlsAlone = " (TLS without haTLSTrustCertPath encrypts, but lets anyone connect)"
	}
	_, port, _ := net.SplitHostPort(haAddr)
	return fmt.Errorf("replication listener on %s would send the whole CommitLog (every message body) to anyone who connects as a slave%s: "+
		"set haAuthSecret (or haAuthSecretFile) in broker.conf, the same on the master and its slaves, "+
		"or use mutual TLS (tlsMode with haTLSTrustCertPath), or listen on loopback (--ha-listen 127.0.0.1:%s)", haAddr, tlsAlone, port)
}

// replicationFrameBytes bounds a replication frame: a DATA frame holds one
// chunk or one record larger than a chunk, so the largest record the
// store takes (an AMQP message up to amqpMaxMessageSize) with room for
// the frame's own fields.
func replicationFrameBytes(st *store.Store) int {
	return max(replication.DefaultMaxFrameBytes, st.MaxRecordBodyBytes()+1<<20)
}
