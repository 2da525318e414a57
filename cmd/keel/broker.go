package main

import (
	"context"
	"errors"
	"log/slog"
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
			stopProfile, err := startEnvCPUProfile(log)
			if err != nil {
				return err
			}
			defer stopProfile()
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
			amqpAddr, kafkaAddr, amqpMgmtAddr := cfg.AMQPListen, cfg.KafkaListen, cfg.AMQPManagementListen
			if cfg.BrokerRole == config.Slave {
				amqpAddr, kafkaAddr, amqpMgmtAddr = "", "", "" // a slave takes no writes: its front doors stay closed
				if cfg.KafkaBrokerRack != "" {
					kafkaAddr = cfg.KafkaListen // but for consumers of its rack (follower fetching)
				}
				logSlaveDoors(log, cfg)
			}
			ls, err := bindListeners(listenSpec{listenBroker, brokerListen, brokerListenFlag},
				listenSpec{listenHA, haAddr, haListenFlag},
				listenSpec{listenHTTP, cfg.HTTPListen, httpListenFlag}, listenSpec{listenAMQP, amqpAddr, amqpListenFlag},
				listenSpec{listenKafka, kafkaAddr, kafkaListenFlag},
				listenSpec{listenAMQPManagement, amqpMgmtAddr, amqpManagementListenFlag})
			if err != nil {
				return err
			}
			if err := checkHTTPExposure(cfg, ls); err != nil {
				return err
			}
			if err := checkAMQPManagementExposure(cfg, ls); err != nil {
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
			log.Info("keel broker", "version", version, "pid", os.Getpid(), "data_dir", cfg.StorePathRootDir,
				"flush", cfg.FlushDiskType, "namesrv", cfg.NamesrvAddr)
			starters := p.roleStarters(&o, brokerListen, amqpAddr, kafkaAddr, amqpMgmtAddr, p.replicationStarter(haAddr))
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

// logSlaveDoors says what each front door does on a SLAVE: the RocketMQ
// door serves reads and refuses writes; the Kafka and AMQP doors are off,
// since their clients write on every path (produce, offset commits,
// publishes, acknowledgements, queue declarations), which a replica of
// its master's log cannot take. A door that broker.conf or a flag asked
// for is a warning: it was asked for and is not served.
func logSlaveDoors(log *slog.Logger, cfg *config.Broker) {
	log.Info("broker door on a SLAVE: serves pulls, queries and admin reads; sends are refused (SERVICE_NOT_AVAILABLE: a replica takes no writes)",
		"door", "rocketmq")
	kafkaAddr := cfg.KafkaListen
	if cfg.KafkaBrokerRack != "" && kafkaAddr != "" {
		log.Info("Kafka door on a SLAVE: serves fetches of consumers in its rack (follower fetching); produce and group requests go to the master",
			"door", "kafka", "rack", cfg.KafkaBrokerRack)
		kafkaAddr = ""
	}
	for _, d := range []struct{ door, key, addr, what string }{
		{"kafka", "kafkaListen", kafkaAddr, "Kafka clients produce and commit offsets"},
		{"amqp", "amqpListen", cfg.AMQPListen, "AMQP clients publish, acknowledge and declare queues"},
		{"amqps", "amqpsListen", cfg.AMQPSListen, "AMQP clients publish, acknowledge and declare queues"},
	} {
		if d.addr == "" {
			continue
		}
		level := slog.LevelInfo
		if cfg.IsSet(d.key) {
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, d.door+" door off on a SLAVE: "+d.what+", which a replica cannot take; clients connect to the master's "+d.key,
			"door", d.door, d.key, d.addr, "role", cfg.BrokerRole)
	}
}

// roleStarters are the starters of a broker of p.cfg's role, in start
// order, with repl as its replication.
func (p *parts) roleStarters(o *options, brokerListen, amqpAddr, kafkaAddr, amqpMgmtAddr string, repl starter) []starter {
	starters := append([]starter{p.storeStarter(), repl}, p.brokerStarters(brokerListen)...)
	if p.cfg.BrokerRole != config.Slave {
		// A slave's log is its master's: its engines and front
		// doors would write.
		starters = append(starters, p.scheduleStarter(), p.transactionStarter())
		starters = append(starters, p.amqpStarter(amqpAddr), p.amqpManagementStarter(amqpMgmtAddr))
	}
	return append(starters, p.httpStarter(p.cfg.HTTPListen, o.http), p.kafkaStarter(kafkaAddr))
}
