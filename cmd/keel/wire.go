package main

// Integration points: the wire_*.go files build each part of the process
// from the validated config. The commands assemble them; nothing else in
// cmd/keel knows a package's API.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/amqp"
	"github.com/keelmq/keel/internal/amqpmgmt"
	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/broker/transaction"
	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/controller"
	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/kafka"
	"github.com/keelmq/keel/internal/metrics"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/replication"
	"github.com/keelmq/keel/internal/store"
)

// parts carries what the starters build, so later parts can use earlier
// ones. Starters run one after another before any service runs, so these
// fields are written before any goroutine reads them.
type parts struct {
	// namesrvDataDir: keel namesrv --data-dir (empty: its state in memory).
	namesrvDataDir   string
	cfg              *config.Broker
	log              *slog.Logger
	repairCorruption bool // --repair-corruption

	// namesrvAddrs are the NameServers the broker registers with; serve
	// adds the embedded one once it is listening.
	namesrvAddrs []string

	// listeners are bound before any service starts (listen.go); nil
	// when the command binds as it starts (keel bench).
	listeners boundListeners
	// net holds the limited listeners and the request budget
	// (wire_netlimit.go).
	net netBounds

	acl *acl.Authorizer // nil: access control off
	tls *tls.Config     // the listeners' TLS; nil: off

	// embeddedNamesrv is the dial address of serve's own NameServer and
	// embeddedNamesrvTLS the broker's TLS to it (nil: plain TCP).
	embeddedNamesrv    string
	embeddedNamesrvTLS *tls.Config
	// peerTLSConf is the TLS to the other groups' masters (memberTLS).
	peerTLSConf *tls.Config

	store       *store.Store
	brokerBound net.Addr // where the broker's listener is bound
	// core is the protocol-free broker, built once on the store and
	// handed to every front door (RocketMQ, Kafka).
	core      *core.Broker
	broker    *broker.Broker
	traffic   doorTraffic         // every listener's traffic counters (wire_doors.go)
	txn       *transaction.Engine // nil: transactional messages rejected
	amqp      *amqp.Server        // nil: no AMQP listener (wire_amqp.go)
	amqpBound []amqpmgmt.Listener // the AMQP listeners, for the management API
	// metrics is set by the HTTP starter; the store's flush hook (started
	// earlier, called from the flusher goroutine) reads it.
	metrics atomic.Pointer[metrics.Metrics]
	// kafka is the Kafka front door once started (wire_kafka.go; the
	// metrics, started earlier, read Kafka groups' lag through it).
	kafka atomic.Pointer[kafka.Server]

	// Replication (wire_replication.go): the bound HA listener (nil: none)
	// and the broker's send gate (nil: every send goes on).
	haBound         net.Addr
	sendGate        func() store.PutResult
	replicationInfo func() map[string]string        // added to the runtime info
	onMasterAddress func(masterAddr, haAddr string) // a slave without haMasterAddress
	registerSoon    atomic.Pointer[func()]          // the broker's, once it exists
	// replicationState is the group member's state (nil: not in a group);
	// the metrics read it (wire_replication_status.go).
	replicationState func() replication.State
	// epochHistory is a master's epoch history (nil: not a master
	// serving slaves), for the Kafka door's OffsetsForLeaderEpoch.
	epochHistory func() replication.History
	// replCore is p.core for the replication service, which starts
	// before the core (wire_replication_offsets.go).
	replCore atomic.Pointer[core.Broker]

	// Controller mode (controlled.go): the agent answering the
	// controller's requests on the broker's listener, the epoch a master
	// registers as masterEpoch, the master's replication, and the
	// figures of /metrics (nil outside controller mode).
	brokerSide      controller.BrokerSide
	masterEpoch     uint32
	roleMaster      *replication.Master
	controlledStats func() metrics.ControlledStats
	// amqpStarted, when set, is told of the AMQP door once it serves.
	amqpStarted func(*amqp.Server)
}

// advertisedAddr is the "ip:port" the broker registers and clients dial:
// brokerIP1, else the listen host (resolved if it is a name), else the first
// non-loopback IPv4 address, else (a host with loopback only) 127.0.0.1
// with a warning on log, with the port the listener actually bound
// (listenAddr may say port 0). It must be an IP: it is the store host of
// every message and so part of every offset message ID.
func advertisedAddr(cfg *config.Broker, listenAddr string, bound net.Addr, log *slog.Logger) (string, error) {
	ifaces, err := net.InterfaceAddrs()
	if err != nil {
		ifaces = nil // fall back to brokerIP1 or the listen host
	}
	return advertisedAddrFrom(cfg, listenAddr, bound, ifaces, log)
}

// advertisedAddrFrom is advertisedAddr with the host's interface
// addresses given.
func advertisedAddrFrom(cfg *config.Broker, listenAddr string, bound net.Addr, ifaces []net.Addr, log *slog.Logger) (string, error) {
	host, err := config.AdvertiseHost(cfg.BrokerIP1, listenAddr, ifaces)
	if errors.Is(err, config.ErrNoAdvertiseIP) {
		host, err = "127.0.0.1", nil
		log.Warn("no non-loopback IPv4 address to advertise: the broker advertises 127.0.0.1, which only clients on this host can reach; set brokerIP1 in broker.conf for others")
	}
	if err != nil {
		return "", err
	}
	if host, err = resolveIP(host); err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", fmt.Errorf("bound address %s: %w", bound, err)
	}
	return net.JoinHostPort(host, port), nil
}

// resolveIP returns host if it is an IP address, else its first IPv4
// address (or its first address if it has no IPv4 one).
func resolveIP(host string) (string, error) {
	if net.ParseIP(host) != nil {
		return host, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err == nil && len(ips) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		return "", fmt.Errorf("resolve advertised host %q: %w", host, err)
	}
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			return ip.Unmap().String(), nil
		}
	}
	return ips[0].String(), nil
}

// dialAddr turns a bound listener address into one a local process can
// dial: the listen host if it names one, else 127.0.0.1, with the bound port.
func dialAddr(listenAddr string, bound net.Addr) string {
	host, _, err := net.SplitHostPort(listenAddr)
	if ip := net.ParseIP(host); err != nil || host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	_, port, _ := net.SplitHostPort(bound.String())
	return net.JoinHostPort(host, port)
}

// remotingService serves h on ln with a remoting server, on the listener
// wrap makes of it (TLS) if wrap is not nil. Its stop stops accepting, lets
// handlers in flight finish until ctx's deadline, and closes every
// connection.
func remotingService(name string, ln net.Listener, cfg remoting.ServerConfig, h remoting.Handler, wrap listenerWrap) (service, net.Addr, error) {
	var err error
	served := ln
	if wrap != nil {
		if served, err = wrap(ln); err != nil {
			ln.Close()
			return service{}, nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	srv := remoting.NewServer(cfg, h)
	return service{
		name: name,
		run: func(context.Context) error {
			if err := srv.Serve(served); !errors.Is(err, remoting.ErrServerClosed) {
				return err
			}
			return nil
		},
		stop: func(ctx context.Context) error {
			err := srv.Shutdown(ctx)
			ln.Close() // in case Serve never ran (a later start failed)
			return err
		},
	}, ln.Addr(), nil
}
