package main

import (
	"errors"
	"os"

	"github.com/keelmq/keel/internal/config"

	"github.com/spf13/cobra"
)

func newBrokerCmd() *cobra.Command {
	var o options
	var haListen string
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
			haAddr, err := haListenAddr(cfg, haListen, brokerListen)
			if err != nil {
				return usageError{err}
			}
			amqpAddr, kafkaAddr := cfg.AMQPListen, cfg.KafkaListen
			if cfg.BrokerRole == config.Slave {
				amqpAddr, kafkaAddr = "", "" // a slave takes no writes: its front doors stay closed
			}
			ls, err := bindListeners(listenSpec{listenBroker, brokerListen, brokerListenFlag},
				listenSpec{listenHA, haAddr, haListenFlag},
				listenSpec{listenHTTP, cfg.HTTPListen, httpListenFlag}, listenSpec{listenAMQP, amqpAddr, amqpListenFlag},
				listenSpec{listenKafka, kafkaAddr, kafkaListenFlag})
			if err != nil {
				return err
			}
			if err := checkHTTPExposure(cfg, ls); err != nil {
				return err
			}
			defer ls.closeAll()
			p.listeners = ls
			log.Info("keel broker", "version", version, "pid", os.Getpid(), "data_dir", cfg.StorePathRootDir,
				"flush", cfg.FlushDiskType, "namesrv", cfg.NamesrvAddr)
			starters := append([]starter{p.storeStarter(), p.replicationStarter(haAddr)}, p.brokerStarters(brokerListen)...)
			if cfg.BrokerRole != config.Slave {
				// A slave's log is its master's: its engines and front
				// doors would write.
				starters = append(starters, p.scheduleStarter(), p.transactionStarter())
				starters = append(starters, p.amqpStarter(amqpAddr))
			}
			starters = append(starters, p.httpStarter(cfg.HTTPListen, o.http), p.kafkaStarter(kafkaAddr))
			return logStopped(log, runServices(cmd.Context(), log, starters...), true)
		},
	}
	o.addConfigFlags(cmd)
	o.addBrokerFlags(cmd)
	o.http.add(cmd)
	cmd.Flags().StringVar(&haListen, "ha-listen", "", "replication listen address of a master (overrides haListenPort; default: the broker listen host on listenPort+1)")
	cmd.Flags().StringVarP(&o.namesrvAddr, "namesrv-addr", "n", "", "NameServer addresses host:port[;host:port] (overrides namesrvAddr; default $"+envNamesrvAddr+" when broker.conf has none)")
	return cmd
}
