package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/keelmq/keel/internal/admin"
	"github.com/spf13/cobra"
)

func newDLQCmd() *cobra.Command {
	f := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List a consumer group's dead letters and resend them to their original topic",
	}
	f.add(cmd)
	cmd.AddCommand(newDLQListCmd(f), newDLQResendCmd(f))
	return cmd
}

func newDLQListCmd(f *adminFlags) *cobra.Command {
	var group string
	var limit int
	cmd := &cobra.Command{
		Use:   "list --group GROUP",
		Short: "List the dead letters of a consumer group (%DLQ%GROUP)",
		Args:  cobra.NoArgs,
		RunE: adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
			if group == "" {
				return usageError{errors.New("dlq list needs --group")}
			}
			d, err := c.ListDLQ(cmd.Context(), group, limit)
			if err != nil {
				return err
			}
			return f.emit(cmd.OutOrStdout(), d, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "Dead letters of %s:\t%d stored, %d not resent by --all yet\n\n", group, d.Total, d.Pending)
				row(w, "OFFSET", "MSG_ID", "ORIGIN_TOPIC", "RECONSUMED", "STORED", "TAGS", "KEYS", "RESENT")
				for _, m := range d.Messages {
					row(w, m.QueueOffset, m.MsgID, dash(m.OriginTopic), m.ReconsumeTimes, fmtTime(m.StoreTime),
						dash(m.Tags), dash(m.Keys), m.Resent)
				}
			})
		}),
	}
	cmd.Flags().StringVar(&group, "group", "", "consumer group (required)")
	cmd.Flags().IntVar(&limit, "limit", admin.DefaultDLQListLimit, "at most this many messages per queue")
	return cmd
}

func newDLQResendCmd(f *adminFlags) *cobra.Command {
	var group, id string
	var all, force bool
	cmd := &cobra.Command{
		Use:   "resend --group GROUP (--msg-id ID | --all) [--force]",
		Short: "Send dead letters back to their original topic (keys kept, resend count added), once each",
		Long: `Send dead letters back to the topic they were first sent to.

The resent message keeps the body, tags, keys, unique key and user properties,
starts again with reconsume times 0 and carries KEEL_DLQ_RESEND_TIMES. Every
resend is recorded on the broker, and a dead letter is resent once: --all
resends every dead letter not resent yet (by --all or --msg-id), --msg-id
refuses one resent before. --force resends anyway (with --all: every stored
dead letter). dlq list shows RESENT true for what was resent.`,
		Args: cobra.NoArgs,
		RunE: adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
			if group == "" || (id == "") == !all {
				return usageError{errors.New("dlq resend needs --group and exactly one of --msg-id or --all")}
			}
			opts := admin.ResendOptions{Force: force}
			var rs []admin.Resent
			var err error
			if all {
				if rs, err = c.ResendAllWith(cmd.Context(), group, opts); err != nil && len(rs) == 0 {
					return err // nothing was resent: the error alone
				}
			} else {
				var r admin.Resent
				r, err = c.ResendDLQWith(cmd.Context(), group, id, opts)
				if errors.Is(err, admin.ErrAlreadyResent) {
					return fmt.Errorf("%w; --force resends it again", err)
				}
				if sent := r.Result.Status == "SEND_OK"; err != nil && !sent {
					return err // nothing was resent: the error alone
				}
				rs = []admin.Resent{r}
			}
			if rs == nil {
				rs = []admin.Resent{}
			}
			if perr := f.emit(cmd.OutOrStdout(), rs, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "Resent %d message(s).\n", len(rs))
				if len(rs) > 0 {
					row(w, "DLQ_OFFSET", "MSG_ID", "TOPIC", "STATUS", "QUEUE", "OFFSET")
				}
				for _, r := range rs {
					row(w, r.DLQOffset, r.MsgID, r.OriginTopic, r.Result.Status, r.Result.QueueID, r.Result.QueueOffset)
				}
			}); perr != nil && err == nil {
				err = perr
			}
			return err
		}),
	}
	cmd.Flags().StringVar(&group, "group", "", "consumer group (required)")
	cmd.Flags().StringVar(&id, "msg-id", "", "resend the dead letter with this id")
	cmd.Flags().BoolVar(&all, "all", false, "resend every dead letter not resent yet")
	cmd.Flags().BoolVar(&force, "force", false, "resend dead letters that were resent before")
	return cmd
}
