package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newCheckCmd() *cobra.Command {
	var o options
	var verbose, yes bool
	var compare, fromReplica string
	cmd := &cobra.Command{
		Use:   "check --data-dir DIR [--compare DIR2 | --repair-from-replica DIR2 [--yes]]",
		Short: "Verify a store offline: checksums, ConsumeQueues against the CommitLog, index files",
		Long: `Verify a store without starting the broker: every CommitLog record's checksum,
every ConsumeQueue entry against the CommitLog, and the index files. Prints a
summary: counts, what earlier repairs left (hole records, lost queue entries,
quarantine files), problems and warnings counted by kind with the first few of
each (-v lists them all). Exits 0 if the store is sound, 1 if any problem was
found or the check could not run. Run it on a stopped broker's data directory;
the directory is only read. Pass the broker's -c file if it sets segment sizes.
docs/operations.md says what to do about each problem.

With --compare DIR2 it compares the committed CommitLogs of two replicas of a
broker group instead (the records that verify, a torn tail left out): it
prints the first byte offset where they differ, up to the shorter committed
end, and which log is longer; exit 0 if they are identical there, 1 if not.

With --repair-from-replica DIR2 it replaces each corrupt entry in the middle of
DIR's CommitLog by the bytes the replica DIR2 holds at the same offsets, if
those verify record by record and fit between intact neighbours identical in
both logs, after you confirm (type yes, or pass --yes). The damaged bytes go to
DIR/quarantine first; offsets do not move. Then it checks DIR as above.
docs/replication.md, "Operations", says when to use it.`,
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
			var sound bool
			switch {
			case compare != "" && fromReplica != "":
				return usageError{errors.New("--compare and --repair-from-replica: give one")}
			case yes && fromReplica == "":
				return usageError{errors.New("--yes confirms --repair-from-replica; it means nothing alone")}
			case compare != "":
				sound, err = p.compareStores(cmd.OutOrStdout(), compare)
			case fromReplica != "":
				sound, err = p.repairFromReplica(cmd.OutOrStdout(), cmd.InOrStdin(), fromReplica, yes)
			default:
				sound, err = p.checkStore(cmd.OutOrStdout(), verbose)
			}
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
	cmd.Flags().StringVar(&compare, "compare", "", "compare the committed CommitLog with the replica's data directory DIR2 (first differing byte)")
	cmd.Flags().StringVar(&fromReplica, "repair-from-replica", "", "replace corrupt entries in the middle of the CommitLog by the replica DIR2's verified bytes")
	cmd.Flags().BoolVar(&yes, "yes", false, "with --repair-from-replica: do not ask for confirmation")
	return cmd
}
