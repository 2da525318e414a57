package main

import (
	"os"

	"github.com/spf13/cobra"
)

func newNamesrvCmd() *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "namesrv",
		Short: "Run a NameServer alone (for several brokers)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := o.newLogger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ls, err := bindListeners(listenSpec{listenNamesrv, o.namesrvListen, namesrvListenFlag})
			if err != nil {
				return err
			}
			defer ls.closeAll()
			p := &parts{log: log, listeners: ls}
			log.Info("keel namesrv", "version", version, "pid", os.Getpid(), "listen", o.namesrvListen)
			return logStopped(log, runServices(cmd.Context(), log, p.namesrvStarters(o.namesrvListen, false)...), false)
		},
	}
	cmd.Flags().StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	o.addNamesrvFlags(cmd)
	return cmd
}
