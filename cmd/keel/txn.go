package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/spf13/cobra"
)

func newTxnCmd() *cobra.Command {
	f := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "txn",
		Short: "Inspect transactional (half) messages",
	}
	f.add(cmd)
	cmd.AddCommand(newTxnListCmd(f))
	return cmd
}

// brokerPending is one broker's answer to the pending-transactions request.
type brokerPending = admin.BrokerTransactions

func newTxnListCmd(f *adminFlags) *cobra.Command {
	var topic, group string
	var limit int
	cmd := &cobra.Command{
		Use:   "list [--topic TOPIC] [--group PRODUCER_GROUP]",
		Short: "List undecided half messages with their age and check count, per master broker",
		Long: `List the transactional half messages whose outcome is not known yet (no
commit or rollback), oldest first, on every master broker: real topic and
queue, producer group, transaction id, half queue offset, age and how many
times the broker has asked the producer group about it (check-backs).
Transactions discarded after transactionCheckMax checks are not listed; they
are kept in TRANS_CHECK_MAX_TIME_TOPIC.

Like the other admin commands it honours --access-key/--secret-key (or
$KEEL_ACCESS_KEY/$KEEL_SECRET_KEY) and --tls/--tls-ca/--tls-insecure. A
broker that does not answer is shown with its error and makes the command
exit non-zero after the others are listed.`,
		Args: cobra.NoArgs,
		RunE: adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
			if limit < 0 {
				return usageError{fmt.Errorf("--limit %d: want 0 (all) or more", limit)}
			}
			out, err := c.PendingTransactions(cmd.Context(), topic, group, limit)
			if err != nil {
				return err
			}
			var failed []string
			for _, b := range out {
				if b.Err != "" {
					failed = append(failed, fmt.Sprintf("broker %s (%s): %s", b.Broker, b.Addr, b.Err))
				}
			}
			err = f.emit(cmd.OutOrStdout(), out, func(w *tabwriter.Writer) {
				row(w, "BROKER", "TOPIC", "QUEUE", "PRODUCER_GROUP", "TRANSACTION_ID", "HALF_OFFSET", "AGE", "CHECKS")
				for _, b := range out {
					for _, p := range b.Pending {
						age := time.Duration(p.AgeMs) * time.Millisecond
						row(w, b.Broker, p.Topic, p.QueueID, p.ProducerGroup, p.TransactionID, p.HalfOffset,
							age.Round(time.Second), p.Checks)
					}
					if b.Total > len(b.Pending) {
						row(w, b.Broker, fmt.Sprintf("... %d more", b.Total-len(b.Pending)), "", "", "", "", "", "")
					}
					if b.Err != "" {
						row(w, b.Broker, "ERROR: "+b.Err, "", "", "", "", "", "")
					}
				}
			})
			if err != nil {
				return err
			}
			if len(failed) > 0 {
				return fmt.Errorf("%s", strings.Join(failed, "; "))
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&topic, "topic", "", "only this (real) topic")
	cmd.Flags().StringVar(&group, "group", "", "only this producer group")
	cmd.Flags().IntVar(&limit, "limit", 1000, "at most this many per broker (0: all)")
	return cmd
}
