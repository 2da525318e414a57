package main

import (
	"github.com/spf13/cobra"
)

func newCheckCmd() *cobra.Command {
	var o options
	var verbose bool
	cmd := &cobra.Command{
		Use:   "check --data-dir DIR",
		Short: "Verify a store offline: checksums, ConsumeQueues against the CommitLog, index files",
		Long: `Verify a store without starting the broker: every CommitLog record's checksum,
every ConsumeQueue entry against the CommitLog, and the index files. Prints a
summary: counts, what earlier repairs left (hole records, lost queue entries,
quarantine files), problems and warnings counted by kind with the first few of
each (-v lists them all). Exits 0 if the store is sound, 1 if any problem was
found or the check could not run. Run it on a stopped broker's data directory;
the directory is only read. Pass the broker's -c file if it sets segment sizes.
docs/operations.md says what to do about each problem.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := o.newLogger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cfg, err := o.loadBroker(cmd, log)
			if err != nil {
				return err
			}
			p := &parts{cfg: cfg, log: log}
			sound, err := p.checkStore(cmd.OutOrStdout(), verbose)
			if err != nil {
				return err
			}
			if !sound {
				return errProblems
			}
			return nil
		},
	}
	o.addConfigFlags(cmd)
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "list every problem and warning, not only the first few of each")
	return cmd
}
