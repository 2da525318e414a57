package main

// keel kafka: the Kafka front door's consumer groups (as
// kafka-consumer-groups.sh --list and --describe show them) and its open
// connections.

import (
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/spf13/cobra"
)

func newKafkaCmd() *cobra.Command {
	f := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "kafka",
		Short: "Inspect the Kafka consumer groups and connections",
	}
	f.add(cmd)
	cmd.AddCommand(newKafkaGroupsCmd(f), newKafkaDescribeCmd(f), newKafkaConnectionsCmd(f))
	return cmd
}

// kafkaAdmin runs show over every master's Kafka report; a broker that
// does not answer is shown with its error and makes the command exit
// non-zero.
func kafkaAdmin(f *adminFlags, show func(w *tabwriter.Writer, out []admin.BrokerKafka)) func(*cobra.Command, []string) error {
	return doorAdmin(f, (*admin.Client).Kafka, func(b admin.BrokerKafka) (string, string, string) { return b.Broker, b.Addr, b.Err }, show)
}

func newKafkaGroupsCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "groups",
		Short: "List the Kafka consumer groups the brokers coordinate: state, assignor, members",
		Long: `List the Kafka consumer groups each broker's Kafka door coordinates (those
that joined since the broker started): Kafka's state (Empty,
PreparingRebalance, CompletingRebalance, Stable), the protocol type and
assignor, the generation and the members. A group's offsets and lag are in
keel kafka describe GROUP (and keel group list, with RocketMQ's groups).`,
		Args: cobra.NoArgs,
		RunE: kafkaAdmin(f, func(w *tabwriter.Writer, out []admin.BrokerKafka) {
			row(w, "BROKER", "GROUP", "STATE", "PROTOCOL_TYPE", "ASSIGNOR", "GENERATION", "MEMBERS")
			for _, b := range out {
				if b.Err != "" {
					row(w, b.Broker, "ERROR: "+b.Err, "", "", "", "", "")
					continue
				}
				if !b.Enabled {
					fmt.Fprintf(w, "# %s: no Kafka listener\n", b.Broker)
					continue
				}
				for _, g := range b.Groups {
					row(w, b.Broker, g.Name, g.State, dash(g.ProtocolType), dash(g.Protocol), g.Generation, len(g.Members))
				}
			}
		}),
	}
}

func newKafkaDescribeCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "describe GROUP",
		Short: "Describe a Kafka consumer group as kafka-consumer-groups.sh --describe does",
		Long: `One row per partition the group committed an offset on or is assigned:
the committed offset (CURRENT-OFFSET; 0 on a partition of a topic the group
committed on elsewhere, as the broker's consume stats count; - on a topic
it committed nothing on), the partition's log end
(LOG-END-OFFSET: its high watermark), LAG, and the member it is assigned to
(CONSUMER-ID, HOST, CLIENT-ID; - if none). A member assigned nothing has a
row of its own with - for the partition.`,
		Args: exactArgs(1, "GROUP"),
		RunE: adminRun(f, func(cmd *cobra.Command, args []string, c *admin.Client) error {
			d, err := c.DescribeKafkaGroup(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return f.emit(cmd.OutOrStdout(), d, func(w *tabwriter.Writer) { printKafkaGroup(w, d) })
		}),
	}
}

func printKafkaGroup(w *tabwriter.Writer, d admin.KafkaGroupDetail) {
	fmt.Fprintf(w, "Group:\t%s\nState:\t%s\nMembers:\t%d\nLag:\t%d\n\n", d.Group, d.State, d.Members, d.Lag)
	row(w, "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")
	for _, r := range d.Rows {
		if r.Topic == "" { // a member assigned nothing
			row(w, r.Group, "-", "-", "-", "-", "-", r.ConsumerID, dash(r.Host), dash(r.ClientID))
			continue
		}
		cur, lag := "-", "-"
		if r.CurrentOffset >= 0 {
			cur, lag = strconv.FormatInt(r.CurrentOffset, 10), strconv.FormatInt(r.Lag, 10)
		}
		row(w, r.Group, r.Topic, r.Partition, cur, r.LogEndOffset, lag, dash(r.ConsumerID), dash(r.Host), dash(r.ClientID))
	}
}

func newKafkaConnectionsCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "connections",
		Short: "List the open Kafka client connections of every broker",
		Args:  cobra.NoArgs,
		RunE: kafkaAdmin(f, func(w *tabwriter.Writer, out []admin.BrokerKafka) {
			row(w, "BROKER", "REMOTE", "CLIENT_ID", "USER", "REQUESTS", "SINCE")
			for _, b := range out {
				if b.Err != "" {
					row(w, b.Broker, "ERROR: "+b.Err, "", "", "", "")
					continue
				}
				if !b.Enabled {
					fmt.Fprintf(w, "# %s: no Kafka listener\n", b.Broker)
					continue
				}
				for _, c := range b.Connections {
					row(w, b.Broker, c.Remote, dash(c.ClientID), dash(c.User), c.Requests, fmtTime(time.UnixMilli(c.SinceMs)))
				}
			}
		}),
	}
}
