package main

import (
	"errors"

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
			haAddr, haLoopbackOnly, err := haListenAddr(cfg, haListen, brokerListen)
			if err != nil {
				return usageError{err}
			}
			if cfg.EnableControllerMode {
				return runControlled(cmd.Context(), &o, cfg, log, brokerListen, haAddr, p.namesrvAddrs)
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
			if err := checkHAExposure(cfg, ls, haAddr); err != nil {
				return err
			}
			if haLoopbackOnly {
				log.Warn("replication listens on loopback only: slaves on other hosts cannot connect until haAuthSecret (or haAuthSecretFile, the same on the master and its slaves) or mutual TLS protects the link",
					"addr", ls[listenHA].Addr().String())
			}
			defer ls.closeAll()
			p.listeners = ls
			log.Info("keel broker", "version", version, "data_dir", cfg.StorePathRootDir,
				"flush", cfg.FlushDiskType, "namesrv", cfg.NamesrvAddr)
			starters := p.roleStarters(&o, brokerListen, amqpAddr, kafkaAddr, p.replicationStarter(haAddr))
			return logStopped(log, runServices(cmd.Context(), log, starters...), true)
		},
	}
	o.addConfigFlags(cmd)
	o.addBrokerFlags(cmd)
	o.http.add(cmd)
	cmd.Flags().StringVar(&haListen, "ha-listen", "", "replication listen address of a master (overrides haListenPort; default: the broker listen host on listenPort+1; beyond loopback it needs haAuthSecret or mutual TLS)")
	cmd.Flags().StringVarP(&o.namesrvAddr, "namesrv-addr", "n", "", "NameServer addresses host:port[;host:port] (overrides namesrvAddr; default $"+envNamesrvAddr+" when broker.conf has none)")
	return cmd
}

// roleStarters are the starters of a broker of p.cfg's role, in start
// order, with repl as its replication.
func (p *parts) roleStarters(o *options, brokerListen, amqpAddr, kafkaAddr string, repl starter) []starter {
	starters := append([]starter{p.storeStarter(), repl}, p.brokerStarters(brokerListen)...)
	if p.cfg.BrokerRole != config.Slave {
		// A slave's log is its master's: its engines and front
		// doors would write.
		starters = append(starters, p.scheduleStarter(), p.transactionStarter())
		starters = append(starters, p.amqpStarter(amqpAddr))
	}
	return append(starters, p.httpStarter(p.cfg.HTTPListen, o.http), p.kafkaStarter(kafkaAddr))
}
