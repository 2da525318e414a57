package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/vfs"
)

// masterEpochsFile, in keel namesrv --data-dir, holds the highest master
// epoch of each broker group the NameServer saw (controller mode), so
// that a restarted NameServer still refuses a stale master.
const masterEpochsFile = "master-epochs.json"

func loadMasterEpochs(dir string) (map[string]uint32, error) {
	if err := vfs.MkdirAllDurable(vfs.OS{}, dir, 0o755); err != nil {
		return nil, fmt.Errorf("namesrv: data directory: %w", err)
	}
	path := filepath.Join(dir, masterEpochsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]uint32{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("namesrv: %w", err)
	}
	var f struct {
		MasterEpochs map[string]uint32 `json:"masterEpochs"`
	}
	if err := json.Unmarshal(b, &f); err != nil || f.MasterEpochs == nil {
		return nil, fmt.Errorf("namesrv: %s is damaged (%v): move it away to start without the groups' master epochs", path, err)
	}
	return f.MasterEpochs, nil
}

// saveMasterEpochs replaces the file durably (temporary file, fsync,
// rename, directory fsync).
func saveMasterEpochs(dir string, e map[string]uint32) error {
	b, err := json.Marshal(struct {
		MasterEpochs map[string]uint32 `json:"masterEpochs"`
	}{e})
	if err != nil {
		return err
	}
	return vfs.WriteFileDurable(vfs.OS{}, filepath.Join(dir, masterEpochsFile), b, 0o644)
}

// namesrvStarters build the NameServer and its remoting server listening on
// addr. Under serve (embedded), the bound address, made dialable, is added
// to the NameServers the broker registers with (over TLS when the listener
// serves TLS, see namesrvTLSMode). Stop order (reverse): the
// server shuts down, then the NameServer's expiry scan stops.
func (p *parts) namesrvStarters(addr string, embedded bool) []starter {
	var ns *namesrv.Server
	return []starter{
		func() (service, error) {
			cfg := namesrv.Config{Logger: p.log.With("component", "namesrv")}
			if dir := p.namesrvDataDir; dir != "" {
				epochs, err := loadMasterEpochs(dir)
				if err != nil {
					return service{}, err
				}
				cfg.MasterEpochs = epochs
				cfg.SaveMasterEpochs = func(e map[string]uint32) error { return saveMasterEpochs(dir, e) }
				p.log.Info("NameServer master epochs kept durably", "file", filepath.Join(dir, masterEpochsFile), "groups", len(epochs))
			}
			ns = namesrv.New(cfg)
			return service{
				name: "namesrv",
				run:  ns.Run,
				stop: func(context.Context) error { return ns.Close() },
			}, nil
		},
		func() (service, error) {
			cfg := remoting.ServerConfig{Logger: p.log.With("component", "namesrv-server"), OnConnClose: ns.OnConnClose,
				FrameBudget: p.requestBudget().Door("namesrv")}
			mode, err := p.namesrvTLSMode(embedded)
			if err != nil {
				return service{}, err
			}
			wrap, err := p.tlsWrap("namesrv-server", mode)
			if err != nil {
				return service{}, err
			}
			ln, err := p.listen(listenNamesrv, addr)
			if err != nil {
				return service{}, err
			}
			svc, bound, err := remotingService("namesrv server", ln, cfg, ns.Handler(), wrap)
			if err != nil {
				return service{}, err
			}
			if embedded {
				p.embeddedNamesrv = dialAddr(addr, bound)
				p.namesrvAddrs = append(p.namesrvAddrs, p.embeddedNamesrv)
			}
			p.log.Info("NameServer listening", "addr", bound.String(), "tls", mode,
				"broker_registers_over_tls", embedded && p.embeddedNamesrvTLS != nil, "auth", "none (a NameServer does no access control)", "reach", reach(bound))
			return svc, nil
		},
	}
}
