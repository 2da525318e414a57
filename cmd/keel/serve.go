package main

import (
	"fmt"
	"os"

	"github.com/keelmq/keel/internal/config"
	"github.com/spf13/cobra"
)

func newServeCmd() *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a NameServer and a broker in one process (the embedded single-node default)",
		Long: `Run a NameServer and a broker in one process.

The broker registers with the embedded NameServer (and with namesrvAddr from
broker.conf, if set). Clients use the NameServer address, by default
127.0.0.1:9876. SIGINT or SIGTERM shuts down cleanly: stop accepting, answer or
fail requests in flight, flush and checkpoint the store.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.serve(cmd) },
	}
	o.addConfigFlags(cmd)
	o.addBrokerFlags(cmd)
	o.addNamesrvFlags(cmd)
	o.http.add(cmd)
	return cmd
}

func (o *options) serve(cmd *cobra.Command) error {
	log, err := o.newLogger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	stopProfile, err := startEnvCPUProfile(log)
	if err != nil {
		return err
	}
	defer stopProfile()
	cfg, err := o.loadBroker(cmd, log)
	if err != nil {
		return err
	}
	if cfg.BrokerRole != config.AsyncMaster {
		return usageError{fmt.Errorf("keel serve is a single-node broker; brokerRole=%s needs keel broker (docs/replication.md)", cfg.BrokerRole)}
	}
	restrictUmask()
	brokerListen := o.brokerListenAddr(cmd, cfg)
	ls, err := bindListeners(listenSpec{listenNamesrv, o.namesrvListen, namesrvListenFlag},
		listenSpec{listenBroker, brokerListen, brokerListenFlag}, listenSpec{listenHTTP, cfg.HTTPListen, httpListenFlag},
		listenSpec{listenAMQP, cfg.AMQPListen, amqpListenFlag},
		listenSpec{listenAMQPManagement, cfg.AMQPManagementListen, amqpManagementListenFlag},
		listenSpec{listenKafka, cfg.KafkaListen, kafkaListenFlag})
	if err != nil {
		return err
	}
	if err := checkHTTPExposure(cfg, ls); err != nil {
		return err
	}
	if err := checkAMQPManagementExposure(cfg, ls); err != nil {
		return err
	}
	defer ls.closeAll()
	p := &parts{cfg: cfg, log: log, namesrvAddrs: cfg.NamesrvAddrs(), repairCorruption: o.repairCorruption, listeners: ls}
	log.Info("keel serve", "version", version, "pid", os.Getpid(), "data_dir", cfg.StorePathRootDir,
		"flush", cfg.FlushDiskType, "cluster", cfg.BrokerClusterName, "broker", cfg.BrokerName)
	starters := []starter{p.storeStarter()}
	starters = append(starters, p.namesrvStarters(o.namesrvListen, true)...)
	starters = append(starters, p.brokerStarters(brokerListen)...)
	starters = append(starters, p.scheduleStarter(), p.transactionStarter())
	starters = append(starters, p.amqpStarter(cfg.AMQPListen), p.amqpManagementStarter(cfg.AMQPManagementListen))
	starters = append(starters, p.httpStarter(cfg.HTTPListen, o.http), p.kafkaStarter(cfg.KafkaListen))
	return logStopped(log, runServices(cmd.Context(), log, starters...), true)
}
