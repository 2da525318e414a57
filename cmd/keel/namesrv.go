package main

import (
	"fmt"
	"os"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/controller"
	"github.com/spf13/cobra"
)

func newNamesrvCmd() *cobra.Command {
	var o options
	var dataDir string
	co := controllerOptions{dataDirFlag: "controller-data-dir"}
	cmd := &cobra.Command{
		Use:   "namesrv",
		Short: "Run a NameServer alone (for several brokers), with a controller voter if --controller-listen is given",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && co.bootstrap == bootstrapFromConfig {
				return usageError{fmt.Errorf("give the voters as --bootstrap=LIST (with '='), not --bootstrap LIST")}
			}
			return cobra.NoArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := o.newLogger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			specs := []listenSpec{{listenNamesrv, o.namesrvListen, namesrvListenFlag}}
			var cc *config.Controller
			var voters []controller.Voter
			if co.listen != "" {
				if cc, voters, err = co.prepare(cmd, log); err != nil {
					return err
				}
				specs = append(specs, listenSpec{listenController, cc.Listen, "--controller-listen"})
			} else if co.bootstrap != "" {
				return usageError{fmt.Errorf("--bootstrap needs --controller-listen")}
			}
			ls, err := bindListeners(specs...)
			if err != nil {
				return err
			}
			defer ls.closeAll()
			p := &parts{log: log, listeners: ls, namesrvDataDir: dataDir}
			starters := p.namesrvStarters(o.namesrvListen, false)
			if cc != nil {
				starters = append(starters, p.controllerStarter(cc, voters, nil))
			}
			log.Info("keel namesrv", "version", version, "pid", os.Getpid(), "listen", o.namesrvListen, "controller", co.listen)
			return logStopped(log, runServices(cmd.Context(), log, starters...), false)
		},
	}
	cmd.Flags().StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep the NameServer's state here: the highest master epoch of each group (controller mode),\nso that after a restart it still refuses a replaced master (empty: in memory only)")
	o.addNamesrvFlags(cmd)
	co.addEmbeddedFlags(cmd)
	return cmd
}
