package main

import (
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/spf13/cobra"
)

func newGroupCmd() *cobra.Command {
	f := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "group",
		Short: "List consumer groups and show their lag, members and dead letters",
	}
	f.add(cmd)
	cmd.AddCommand(newGroupListCmd(f), newGroupDescribeCmd(f))
	return cmd
}

func newGroupListCmd(f *adminFlags) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List consumer groups with members, total lag, retry and dead-letter counts",
		Args:  cobra.NoArgs,
		RunE: adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
			gs, err := c.Groups(cmd.Context(), all)
			if err != nil {
				return err
			}
			if gs == nil {
				gs = []admin.Group{}
			}
			return f.emit(cmd.OutOrStdout(), gs, func(w *tabwriter.Writer) {
				row(w, "GROUP", "MEMBERS", "MODEL", "BROKER_OFFSET", "CONSUMER_OFFSET", "LAG", "RETRY_LAG", "DLQ")
				for _, g := range gs {
					row(w, g.Name, g.Members, dash(g.MessageModel), g.BrokerOffset, g.ConsumerOffset, g.Lag, g.RetryMessages, g.DLQMessages)
				}
			})
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "include the groups of the tools and of the broker itself")
	return cmd
}

func newGroupDescribeCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "describe GROUP",
		Short: "Show per topic and queue the broker offset, the consumer offset and the lag, and the members",
		Args:  exactArgs(1, "GROUP"),
		RunE: adminRun(f, func(cmd *cobra.Command, args []string, c *admin.Client) error {
			d, err := c.DescribeGroup(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if d.Queues == nil {
				d.Queues = []admin.QueueLag{}
			}
			if d.Clients == nil {
				d.Clients = []admin.Member{}
			}
			return f.emit(cmd.OutOrStdout(), d, func(w *tabwriter.Writer) { printGroup(w, d) })
		}),
	}
}

func printGroup(w *tabwriter.Writer, d admin.GroupDetail) {
	fmt.Fprintf(w, "Group:\t%s\n", d.Name)
	if d.MessageModel != "" {
		fmt.Fprintf(w, "Model:\t%s, %s\n", d.MessageModel, d.ConsumeType)
	}
	if d.Config != nil {
		fmt.Fprintf(w, "Config:\tconsume %v, retry queues %d, max retries %d\n", d.Config.ConsumeEnable,
			d.Config.RetryQueueNums, d.Config.RetryMaxTimes)
	}
	topics := make([]string, 0, len(d.Subscriptions))
	for t := range d.Subscriptions {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		fmt.Fprintf(w, "Subscription:\t%s %s\n", t, d.Subscriptions[t])
	}
	fmt.Fprintf(w, "Total:\tbroker offset %d, consumer offset %d, lag %d (of which retry lag %d), dead letters %d\n\n",
		d.BrokerOffset, d.ConsumerOffset, d.Lag, d.RetryMessages, d.DLQMessages)
	// LAST_CONSUMED is when the group's offset last moved (not the store
	// time of the last consumed message, which is old whenever that
	// message waited); BEHIND is the age of the oldest unconsumed message.
	row(w, "TOPIC", "BROKER", "QUEUE", "BROKER_OFFSET", "CONSUMER_OFFSET", "LAG", "LAST_CONSUMED", "BEHIND")
	for _, q := range d.Queues {
		last, behind := "-", "-"
		if q.ConsumedAt > 0 {
			last = fmtTime(time.UnixMilli(q.ConsumedAt))
		}
		if q.Lag == 0 {
			behind = "0s"
		} else if q.OldestUnconsumed > 0 {
			behind = max(time.Since(time.UnixMilli(q.OldestUnconsumed)), 0).Round(time.Second).String()
		}
		row(w, q.Topic, q.Broker, q.QueueID, q.BrokerOffset, q.ConsumerOffset, q.Lag, last, behind)
	}
	fmt.Fprintf(w, "\nMembers:\t%d\n", d.Members)
	if len(d.Clients) > 0 {
		row(w, "CLIENT_ID", "ADDRESS", "LANGUAGE", "VERSION")
		for _, m := range d.Clients {
			row(w, m.ClientID, m.ClientAddr, m.Language, m.Version)
		}
	}
}
