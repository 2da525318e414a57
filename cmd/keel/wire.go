package main

// Integration points: each function below builds one part of the process
// from the validated config. The commands assemble them; nothing else in
// cmd/keel knows a package's API. A part whose package has not landed yet
// returns errNotBuilt, and the command says so instead of pretending.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/remoting"
)

// errNotBuilt is returned by an integration point whose package is not part
// of this build yet.
var errNotBuilt = errors.New("not implemented in this build yet")

// parts carries what the starters build, so later parts can use earlier ones.
type parts struct {
	cfg *config.Broker
	log *slog.Logger
	// namesrvAddrs are the NameServers the broker registers with; serve
	// adds the embedded one once it is listening.
	namesrvAddrs []string
	// store, namesrv and broker handles are added here as they are wired.
}

// storeStarter opens the message store under cfg.StorePathRootDir
// (store.Open with a store.Config derived from cfg: FlushDiskType,
// CommitLogSegmentBytes, ConsumeQueueSegmentEntries, SyncFlushTimeout,
// FlushIntervalCommitLog, FileReservedTime, DeleteWhen, the disk ratios,
// MaxMessageBytes). Its stop closes the store: flush, checkpoint, unlock.
func (p *parts) storeStarter() starter {
	return func() (service, error) {
		return service{}, fmt.Errorf("store: %w", errNotBuilt)
	}
}

// namesrvStarter listens on addr and serves the NameServer's handler on a
// remoting server; stop shuts the server down.
// Under serve (embedded), it appends the bound address, with a dialable
// host, to p.namesrvAddrs.
func (p *parts) namesrvStarter(addr string, embedded bool) starter {
	return func() (service, error) {
		return service{}, fmt.Errorf("namesrv on %s: %w", addr, errNotBuilt)
	}
}

// brokerStarter builds the broker on the open store (broker.New with a
// broker.Config derived from cfg and the advertised address), listens on
// listenAddr and serves broker.Handler() on a remoting server whose
// OnConnClose is the broker's; run is broker.Run (NameServer registration to
// p.namesrvAddrs, client expiry, offset flush). Stop order: broker.Close
// (answers held pulls, flushes offsets, unregisters), then the server.
func (p *parts) brokerStarter(listenAddr string) starter {
	return func() (service, error) {
		return service{}, fmt.Errorf("broker on %s: %w", listenAddr, errNotBuilt)
	}
}

// checkStore verifies the store under cfg.StorePathRootDir offline
// (store.Check: every record's checksum, ConsumeQueue entries against the
// CommitLog, index files), writes a summary to w and reports whether the
// store is sound.
func (p *parts) checkStore(w io.Writer) (sound bool, err error) {
	return false, fmt.Errorf("check: %w", errNotBuilt)
}

// advertisedAddr is the "host:port" the broker registers and clients dial:
// brokerIP1, else the listen host, else the first non-loopback IPv4 address,
// with the port the listener actually bound (listenAddr may say port 0).
func advertisedAddr(cfg *config.Broker, listenAddr string, bound net.Addr) (string, error) {
	ifaces, err := net.InterfaceAddrs()
	if err != nil {
		ifaces = nil // fall back to brokerIP1 or the listen host
	}
	host, err := config.AdvertiseHost(cfg.BrokerIP1, listenAddr, ifaces)
	if err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", fmt.Errorf("bound address %s: %w", bound, err)
	}
	return net.JoinHostPort(host, port), nil
}

// remotingService listens on addr and serves h with a remoting server. Its
// stop stops accepting, lets handlers in flight finish until ctx's deadline,
// and closes every connection.
func remotingService(name, addr string, cfg remoting.ServerConfig, h remoting.Handler) (service, net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return service{}, nil, fmt.Errorf("%s: %w", name, err)
	}
	srv := remoting.NewServer(cfg, h)
	return service{
		name: name,
		run: func(context.Context) error {
			if err := srv.Serve(ln); !errors.Is(err, remoting.ErrServerClosed) {
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
