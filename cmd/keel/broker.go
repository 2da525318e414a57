package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newBrokerCmd() *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "broker -n NAMESRV_ADDR",
		Short: "Run a broker alone, registering with separate NameServers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := o.newLogger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cfg, err := o.loadBroker(cmd, log)
			if err != nil {
				return err
			}
			restrictUmask()
			p := &parts{cfg: cfg, log: log, namesrvAddrs: cfg.NamesrvAddrs(), repairCorruption: o.repairCorruption}
			if len(p.namesrvAddrs) == 0 {
				return usageError{errors.New("keel broker needs a NameServer: -n host:port, namesrvAddr in broker.conf, or $NAMESRV_ADDR")}
			}
			brokerListen := o.brokerListenAddr(cmd, cfg)
			ls, err := bindListeners(listenSpec{listenBroker, brokerListen, brokerListenFlag},
				listenSpec{listenHTTP, cfg.HTTPListen, httpListenFlag}, listenSpec{listenKafka, cfg.KafkaListen, kafkaListenFlag})
			if err != nil {
				return err
			}
			if err := checkHTTPExposure(cfg, ls); err != nil {
				return err
			}
			defer ls.closeAll()
			p.listeners = ls
			log.Info("keel broker", "version", version, "data_dir", cfg.StorePathRootDir,
				"flush", cfg.FlushDiskType, "namesrv", cfg.NamesrvAddr)
			starters := append([]starter{p.storeStarter()}, p.brokerStarters(brokerListen)...)
			starters = append(starters, p.scheduleStarter(), p.transactionStarter())
			starters = append(starters, p.httpStarter(cfg.HTTPListen, o.http), p.kafkaStarter(cfg.KafkaListen))
			return logStopped(log, runServices(cmd.Context(), log, starters...), true)
		},
	}
	o.addConfigFlags(cmd)
	o.addBrokerFlags(cmd)
	o.http.add(cmd)
	cmd.Flags().StringVarP(&o.namesrvAddr, "namesrv-addr", "n", "", "NameServer addresses host:port[;host:port] (overrides namesrvAddr; default $"+envNamesrvAddr+" when broker.conf has none)")
	return cmd
}
