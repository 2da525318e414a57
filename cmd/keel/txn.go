package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/broker/transaction"
	"github.com/keelmq/keel/internal/remoting"
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
type brokerPending struct {
	Broker string `json:"broker"`
	Addr   string `json:"addr"`
	transaction.PendingList
}

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
are kept in TRANS_CHECK_MAX_TIME_TOPIC.`,
		Args: cobra.NoArgs,
		RunE: adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
			masters, err := c.Masters(cmd.Context())
			if err != nil {
				return err
			}
			var out []brokerPending
			for _, b := range masters {
				l, err := listPending(cmd.Context(), b.Addr, topic, group, limit, f.timeout)
				if err != nil {
					return fmt.Errorf("broker %s (%s): %w", b.Name, b.Addr, err)
				}
				out = append(out, brokerPending{Broker: b.Name, Addr: b.Addr, PendingList: l})
			}
			return f.emit(cmd.OutOrStdout(), out, func(w *tabwriter.Writer) {
				row(w, "BROKER", "TOPIC", "QUEUE", "PRODUCER_GROUP", "TRANSACTION_ID", "HALF_OFFSET", "AGE", "CHECKS")
				for _, b := range out {
					for _, p := range b.Pending {
						row(w, b.Broker, p.Topic, p.QueueID, p.ProducerGroup, p.TransactionID, p.HalfOffset,
							p.Age().Round(time.Second), p.Checks)
					}
					if b.Total > len(b.Pending) {
						row(w, b.Broker, fmt.Sprintf("... %d more", b.Total-len(b.Pending)), "", "", "", "", "", "")
					}
				}
			})
		}),
	}
	cmd.Flags().StringVar(&topic, "topic", "", "only this (real) topic")
	cmd.Flags().StringVar(&group, "group", "", "only this producer group")
	cmd.Flags().IntVar(&limit, "limit", 1000, "at most this many per broker (0: all)")
	return cmd
}

// listPending asks one broker for its undecided half messages (Keel-private
// request code broker.ReqListTransactions).
func listPending(ctx context.Context, addr, topic, group string, limit int, timeout time.Duration) (transaction.PendingList, error) {
	var l transaction.PendingList
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{})
	if err != nil {
		return l, err
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, remoting.NewRequest(broker.ReqListTransactions, map[string]string{
		"topic": topic, "producerGroup": group, "limit": fmt.Sprint(limit)}, nil))
	if err != nil {
		return l, err
	}
	if resp.Code != remoting.ResSuccess {
		return l, fmt.Errorf("code %d: %s", resp.Code, resp.Remark)
	}
	if err := json.Unmarshal(resp.Body, &l); err != nil {
		return l, fmt.Errorf("bad response body: %w", err)
	}
	return l, nil
}
