package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/keelmq/keel/internal/admin"
	"github.com/spf13/cobra"
)

func newTopicCmd() *cobra.Command {
	f := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "List, describe, create, update and delete topics of a running cluster",
	}
	f.add(cmd)
	cmd.AddCommand(newTopicListCmd(f), newTopicDescribeCmd(f), newTopicCreateCmd(f), newTopicUpdateCmd(f), newTopicDeleteCmd(f))
	return cmd
}

func newTopicListCmd(f *adminFlags) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List topics with their queues, permission and stored message count",
		Args:  cobra.NoArgs,
		RunE: adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
			ts, err := c.Topics(cmd.Context(), all, true)
			if err != nil {
				return err
			}
			if ts == nil {
				ts = []admin.Topic{}
			}
			return f.emit(cmd.OutOrStdout(), ts, func(w *tabwriter.Writer) {
				row(w, "TOPIC", "KIND", "READ", "WRITE", "PERM", "BROKERS", "MESSAGES")
				for _, t := range ts {
					row(w, t.Name, t.Kind, t.ReadQueues(), t.WriteQueues(), admin.PermString(t.Perm()), len(t.Brokers), t.Messages)
				}
			})
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "include system topics")
	return cmd
}

func newTopicDescribeCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "describe TOPIC",
		Short: "Show a topic's configuration and each queue's min and max offsets",
		Args:  exactArgs(1, "TOPIC"),
		RunE: adminRun(f, func(cmd *cobra.Command, args []string, c *admin.Client) error {
			d, err := c.DescribeTopic(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return f.emit(cmd.OutOrStdout(), d, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "Topic:\t%s (%s)\n", d.Name, d.Kind)
				for _, b := range d.Brokers {
					fmt.Fprintf(w, "Broker %s:\tread %d, write %d, perm %s, order %v\n", b.Broker, b.ReadQueues, b.WriteQueues,
						admin.PermString(b.Perm), b.Order)
				}
				fmt.Fprintf(w, "Messages:\t%d\n\n", d.Messages)
				row(w, "BROKER", "QUEUE", "MIN_OFFSET", "MAX_OFFSET", "MESSAGES")
				for _, q := range d.Queues {
					row(w, q.Broker, q.QueueID, q.MinOffset, q.MaxOffset, q.Messages)
				}
			})
		}),
	}
}

// topicFlags are the settings of topic create and update.
type topicFlags struct {
	queues, read, write int32
	perm                string
	order               bool
	brokers             []string
	where               whereFlags
}

// whereFlags choose the masters a topic command changes (mqadmin's -c and
// -b); neither means every master.
type whereFlags struct{ cluster, brokerAddr string }

func (w *whereFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&w.cluster, "cluster", "c", "", "only the masters of this cluster (brokerClusterName)")
	fl.StringVarP(&w.brokerAddr, "broker-addr", "b", "", "only the master at this address (host:port)")
	cmd.MarkFlagsMutuallyExclusive("cluster", "broker-addr")
}

func (w *whereFlags) where() admin.Where {
	return admin.Where{Cluster: w.cluster, BrokerAddr: w.brokerAddr}
}

func (t *topicFlags) add(cmd *cobra.Command, create bool) {
	t.where.add(cmd)
	fl := cmd.Flags()
	def := int32(0)
	if create {
		def = 4
	}
	fl.Int32Var(&t.queues, "queues", def, "read and write queue count")
	fl.Int32Var(&t.read, "read-queues", 0, "read queue count (overrides --queues)")
	fl.Int32Var(&t.write, "write-queues", 0, "write queue count (overrides --queues)")
	fl.StringVar(&t.perm, "perm", "rw", "permission: rw, r, w or none")
	fl.BoolVar(&t.order, "order", false, "ordered topic")
	if create {
		fl.StringSliceVar(&t.brokers, "broker", nil, "broker names to create it on (default: every master)")
	}
}

func (t *topicFlags) queueCounts() (read, write int32, err error) {
	read, write = t.queues, t.queues
	if t.read != 0 {
		read = t.read
	}
	if t.write != 0 {
		write = t.write
	}
	if read < 1 || write < 1 {
		return 0, 0, usageError{errors.New("queue counts must be at least 1")}
	}
	return read, write, nil
}

func newTopicCreateCmd(f *adminFlags) *cobra.Command {
	t := &topicFlags{}
	cmd := &cobra.Command{
		Use:   "create TOPIC",
		Short: "Create a topic on every master broker (or those of one cluster, one address, or the ones named)",
		Long: `Create a topic on every master broker registered with the NameServers, or
on the masters of one cluster (-c CLUSTER), on the one master at an address
(-b HOST:PORT) or on the masters named with --broker. A producer of the
official clients spreads its sends over the queues of every group the topic
is on, and a consumer group divides all of them among its members. It fails
if a chosen master has the topic already; a master not chosen may have it,
so this is also how a topic reaches a broker group added later.`,
		Args: exactArgs(1, "TOPIC"),
		RunE: adminRun(f, func(cmd *cobra.Command, args []string, c *admin.Client) error {
			read, write, err := t.queueCounts()
			if err != nil {
				return err
			}
			perm, err := admin.ParsePerm(t.perm)
			if err != nil {
				return usageError{err}
			}
			spec := admin.TopicSpec{Topic: args[0], ReadQueues: read, WriteQueues: write, Perm: perm, Order: t.order, Brokers: t.brokers,
				Where: t.where.where()}
			if err := c.CreateTopic(cmd.Context(), spec); err != nil {
				return err
			}
			return showTopic(cmd, f, c, args[0], "created")
		}),
	}
	t.add(cmd, true)
	return cmd
}

func newTopicUpdateCmd(f *adminFlags) *cobra.Command {
	t := &topicFlags{}
	cmd := &cobra.Command{
		Use:   "update TOPIC",
		Short: "Change a topic's queue counts, permission or order flag on every broker hosting it",
		Long: `Change a topic's queue counts, permission or order flag on every master
hosting it. With -c CLUSTER or -b HOST:PORT the change goes to the masters of
that cluster or the one master at that address, and a chosen master that
does not have the topic yet gets it, configured as a master that has it with
the change applied (as mqadmin updateTopic -c does); without a change flag
that copy is all it does.`,
		Args: exactArgs(1, "TOPIC"),
		RunE: adminRun(f, func(cmd *cobra.Command, args []string, c *admin.Client) error {
			change, err := t.change(cmd)
			if err != nil {
				return err
			}
			if err := c.UpdateTopicAt(cmd.Context(), args[0], t.where.where(), change); err != nil {
				return err
			}
			return showTopic(cmd, f, c, args[0], "updated")
		}),
	}
	t.add(cmd, false)
	return cmd
}

// change builds the update from the flags that were given.
func (t *topicFlags) change(cmd *cobra.Command) (func(*admin.TopicConfig), error) {
	set := func(name string) bool { return cmd.Flags().Changed(name) }
	if !set("queues") && !set("read-queues") && !set("write-queues") && !set("perm") && !set("order") {
		if t.where.cluster != "" || t.where.brokerAddr != "" {
			return func(*admin.TopicConfig) {}, nil // copy it to the chosen masters that lack it
		}
		return nil, usageError{errors.New("nothing to update: give --queues, --read-queues, --write-queues, --perm or --order")}
	}
	for name, v := range map[string]int32{"queues": t.queues, "read-queues": t.read, "write-queues": t.write} {
		if set(name) && v < 1 {
			return nil, usageError{fmt.Errorf("--%s must be at least 1", name)}
		}
	}
	perm, err := admin.ParsePerm(t.perm)
	if err != nil {
		return nil, usageError{err}
	}
	return func(tc *admin.TopicConfig) {
		if set("queues") {
			tc.ReadQueues, tc.WriteQueues = t.queues, t.queues
		}
		if set("read-queues") {
			tc.ReadQueues = t.read
		}
		if set("write-queues") {
			tc.WriteQueues = t.write
		}
		if set("perm") {
			tc.Perm = perm
		}
		if set("order") {
			tc.Order = t.order
		}
	}, nil
}

// showTopic prints a topic's configuration after a change.
func showTopic(cmd *cobra.Command, f *adminFlags, c *admin.Client, name, what string) error {
	t, err := c.Topic(cmd.Context(), name)
	if err != nil {
		return err
	}
	return f.emit(cmd.OutOrStdout(), t, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "Topic %s %s.\n", name, what)
		row(w, "BROKER", "READ", "WRITE", "PERM", "ORDER")
		for _, b := range t.Brokers {
			row(w, b.Broker, b.ReadQueues, b.WriteQueues, admin.PermString(b.Perm), b.Order)
		}
	})
}

func newTopicDeleteCmd(f *adminFlags) *cobra.Command {
	var w whereFlags
	cmd := &cobra.Command{
		Use:   "delete TOPIC",
		Short: "Delete a topic with its messages and consumer offsets from every broker",
		Long: `Delete a topic with its messages and consumer offsets from every master
hosting it (its slaves follow) and its route from the NameServers. With
-c CLUSTER or -b HOST:PORT only from the masters of that cluster or the one
master at that address; the other groups keep the topic and its route.`,
		Args: exactArgs(1, "TOPIC"),
		RunE: adminRun(f, func(cmd *cobra.Command, args []string, c *admin.Client) error {
			if err := c.DeleteTopicAt(cmd.Context(), args[0], w.where()); err != nil {
				return err
			}
			return f.emit(cmd.OutOrStdout(), map[string]any{"topic": args[0], "deleted": true}, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "Topic %s deleted.\n", args[0])
			})
		}),
	}
	w.add(cmd)
	return cmd
}

// exactArgs is cobra.ExactArgs with a usage error naming the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s needs %s (got %d arguments)", cmd.CommandPath(), names, len(args))}
		}
		return nil
	}
}
