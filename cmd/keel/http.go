package main

// The HTTP listener (--http-listen, httpListen in broker.conf; empty = off):
// Prometheus metrics at /metrics, /healthz and /readyz for orchestration,
// and the web console at / with its API under /api/.
//
//	/healthz  200 "ok" while the process serves HTTP (liveness)
//	/readyz   200 "ready" when the store is open and writable and a
//	          NameServer accepted the broker's registration recently;
//	          503 with the reasons otherwise (readiness)
//
// The listener defaults to loopback (127.0.0.1:8080). /metrics and the
// console require credentials when httpToken is set (the token, as Bearer
// or Basic password) or aclEnable=true (an admin account of the ACL file as
// HTTP Basic accessKey:secretKey, or the token if also set); see httpauth.
// The two probes stay open so orchestrators need no secret, and they reveal
// nothing but readiness. A listener beyond loopback with neither stops the
// start (checkHTTPExposure): the console shows message bodies.
//
// The console reads the cluster through an admin client like the CLI's:
// to the NameServers this process registers with, over TLS pinned to the
// listeners' own certificate when serve's NameServer serves TLS, and
// signed with KEEL_ACCESS_KEY / KEEL_SECRET_KEY from the environment when
// set (needed with aclEnable=true).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/console"
	"github.com/keelmq/keel/internal/httpauth"
	"github.com/keelmq/keel/internal/metrics"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/spf13/cobra"
)

// httpOptions are the flags of the HTTP listener besides --http-listen.
type httpOptions struct {
	consoleWrite bool
}

func (h *httpOptions) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&h.consoleWrite, "console-write", false,
		"let the web console act (create topics, resend dead letters); read-only without it")
}

// storeFS is the filesystem the store runs on (storeConfig keeps the
// default, the real one).
var storeFS vfs.FS = vfs.OS{}

// httpReadHeaderTimeout bounds a client's request header.
const httpReadHeaderTimeout = 10 * time.Second

// httpStarter serves addr (nothing if empty); it must come after the
// store's and the broker's starters. Its stop (first, in reverse order)
// stops the console's sampler and shuts the server down.
func (p *parts) httpStarter(addr string, ho httpOptions) starter {
	return func() (service, error) {
		if addr == "" {
			return service{name: "http"}, nil
		}
		if p.store == nil || p.broker == nil {
			return service{}, errors.New("http: the store and the broker must start first")
		}
		m := metrics.New(metrics.Config{IncludeGoMetrics: true, RocketMQNames: p.cfg.MetricsRocketMQNames, Sources: metrics.Sources{
			Broker: p.broker, Store: p.store, Doors: p.doorSnapshots, Transactions: p.transactionStats(), AMQP: p.amqpStats(),
			Replication: p.replicationStats(), NetLimits: p.netLimitStats, Controlled: p.controlledStats,
			DiskUsage: func() (uint64, uint64, error) { return storeFS.DiskUsage(p.cfg.StorePathRootDir) },
		}})
		p.metrics.Store(m)
		acfg := admin.Config{NamesrvAddrs: p.namesrvAddrs, TLS: p.embeddedNamesrvTLS,
			AccessKey: os.Getenv(envAccessKey), SecretKey: os.Getenv(envSecretKey)}
		if p.embeddedNamesrv == "" { // external NameServers (plain TCP): the brokers as the other members dial them
			tc, err := p.peerTLS()
			if err != nil {
				return service{}, err
			}
			acfg.BrokerTLS = tc
		}
		ac := admin.New(acfg)
		log := p.log.With("component", "http")
		ccfg := console.Config{Admin: ac, Write: ho.consoleWrite, Version: version,
			Logger: p.log.With("component", "console"), Local: p.localStats}
		ctl := controllerClientOf(p.cfg)
		if ctl != nil {
			ccfg.Elections = consoleElections(ctl) // the Replication page's election history
		}
		closeAll := func() {
			ac.Close()
			if ctl != nil {
				ctl.Close()
			}
		}
		con := console.New(ccfg)
		guarded := http.NewServeMux()
		guarded.Handle("GET /metrics", m.Handler())
		guarded.Handle("/", con.Handler())
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("GET /readyz", p.readyz)
		mux.Handle("/", httpauth.Guard(p.httpAuth(), guarded, log))
		ln, err := p.listen(listenHTTP, addr)
		if err != nil {
			closeAll()
			return service{}, err
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: httpReadHeaderTimeout}
		log.Info("HTTP listening", "addr", ln.Addr().String(), "serves", httpServes(ho),
			"auth", httpAuthDescription(p.cfg.HTTPToken != "", p.acl != nil), "reach", reach(ln.Addr()))
		if p.cfg.ACLEnable && os.Getenv(envAccessKey) == "" {
			log.Warn("aclEnable=true but KEEL_ACCESS_KEY/KEEL_SECRET_KEY are not set: the console's requests are unsigned and refused")
		}
		return service{
			name: "http",
			run: func(ctx context.Context) error {
				go con.Run(ctx)
				go m.Run(ctx) // the RocketMQ-compatible rates' samples
				if err := srv.Serve(remotingGuard{ln}); !errors.Is(err, http.ErrServerClosed) {
					return err
				}
				return nil
			},
			stop: func(ctx context.Context) error {
				err := srv.Shutdown(ctx)
				ln.Close()
				closeAll()
				return err
			},
		}, nil
	}
}

// httpAuth is what the HTTP endpoint accepts besides the open probes.
func (p *parts) httpAuth() httpauth.Config {
	c := httpauth.Config{Token: p.cfg.HTTPToken}
	if p.acl != nil {
		c.Account = p.acl.AdminCredentials
	}
	return c
}

// httpServes lists what the HTTP listener serves, for the startup log.
func httpServes(ho httpOptions) string {
	console := "console (read-only)"
	if ho.consoleWrite {
		console = "console (read-write)"
	}
	return "/metrics, " + console + " and /api/, /healthz, /readyz (open)"
}

// httpAuthDescription says what the HTTP endpoint requires.
func httpAuthDescription(token, acl bool) string {
	switch {
	case token && acl:
		return "httpToken or an ACL admin account"
	case token:
		return "httpToken"
	case acl:
		return "an ACL admin account (HTTP Basic accessKey:secretKey)"
	}
	return "none"
}

// reach says who can connect to a bound address, for the startup log.
func reach(a net.Addr) string {
	if loopback(a) {
		return "this host only (loopback)"
	}
	return "the network"
}

// checkHTTPExposure refuses an HTTP listener reachable beyond this host
// that lets anyone read the console and metrics: bound to a non-loopback
// address with neither httpToken nor aclEnable. It runs right after the
// listeners are bound, before any service starts.
func checkHTTPExposure(cfg *config.Broker, ls boundListeners) error {
	ln := ls[listenHTTP]
	if ln == nil || loopback(ln.Addr()) || cfg.HTTPToken != "" || cfg.ACLEnable {
		return nil
	}
	ls.closeAll()
	return fmt.Errorf("HTTP listener on %s would show the console (message bodies) and /metrics to anyone who can reach it: "+
		"set httpToken (or aclEnable=true) in broker.conf, or listen on loopback (--http-listen 127.0.0.1:8080)", cfg.HTTPListen)
}

// onFlush is the store's flush hook: it feeds the metrics once they exist.
func (p *parts) onFlush(d time.Duration, bytes int64) {
	if m := p.metrics.Load(); m != nil {
		m.ObserveFlush(d, bytes)
	}
}

// loopback reports whether a bound address accepts only local connections.
func loopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// transactionStats reads the transaction engine's counters; nil when
// transactional messages are rejected.
func (p *parts) transactionStats() func() metrics.TransactionStats {
	if p.txn == nil {
		return nil
	}
	return func() metrics.TransactionStats {
		s := p.txn.Stats()
		return metrics.TransactionStats{Pending: s.Pending, Prepared: s.Prepared, Committed: s.Committed,
			RolledBack: s.RolledBack, Checks: s.Checks}
	}
}

// readyz answers 200 when the broker can take traffic.
func (p *parts) readyz(w http.ResponseWriter, _ *http.Request) {
	var problems []string
	s := p.store.Stats()
	if s.ReadOnly != nil {
		problems = append(problems, "store not writable: "+s.ReadOnly.Error())
	}
	if s.DiskFull {
		problems = append(problems, "not enough free disk space (the hard limit or the free-space reserve): writes refused")
	}
	if !p.broker.Registered() {
		problems = append(problems, "not registered with a NameServer")
	}
	if len(problems) > 0 {
		http.Error(w, "not ready: "+strings.Join(problems, "; "), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// localStats describes this process's store for the console's overview.
func (p *parts) localStats() console.LocalStats {
	s := p.store.Stats()
	l := console.LocalStats{CommitLogBytes: s.WrittenOffset - s.MinOffset, Writable: s.ReadOnly == nil && !s.DiskFull}
	l.DiskTotalBytes, l.DiskFreeBytes, _ = storeFS.DiskUsage(p.cfg.StorePathRootDir)
	return l
}
