package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/spf13/cobra"
)

func newAMQPCmd() *cobra.Command {
	f := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "amqp",
		Short: "Inspect the AMQP 0-9-1 queues, exchanges and connections",
	}
	f.add(cmd)
	cmd.AddCommand(newAMQPQueuesCmd(f), newAMQPExchangesCmd(f), newAMQPConnectionsCmd(f))
	return cmd
}

// amqpAdmin runs show over every master's AMQP report; a broker that does
// not answer is shown with its error and makes the command exit non-zero.
func amqpAdmin(f *adminFlags, show func(w *tabwriter.Writer, out []admin.BrokerAMQP)) func(*cobra.Command, []string) error {
	return doorAdmin(f, (*admin.Client).AMQP, func(b admin.BrokerAMQP) (string, string, string) { return b.Broker, b.Addr, b.Err }, show)
}

// doorAdmin runs show over every master's report of a front door (fetch);
// a broker that does not answer (who gives its name, address and error)
// is shown with its error and makes the command exit non-zero.
func doorAdmin[T any](f *adminFlags, fetch func(*admin.Client, context.Context) ([]T, error),
	who func(T) (broker, addr, err string), show func(w *tabwriter.Writer, out []T)) func(*cobra.Command, []string) error {
	return adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
		out, err := fetch(c, cmd.Context())
		if err != nil {
			return err
		}
		var failed []string
		for _, b := range out {
			if name, addr, e := who(b); e != "" {
				failed = append(failed, fmt.Sprintf("broker %s (%s): %s", name, addr, e))
			}
		}
		if err := f.emit(cmd.OutOrStdout(), out, func(w *tabwriter.Writer) { show(w, out) }); err != nil {
			return err
		}
		if len(failed) > 0 {
			return fmt.Errorf("%s", strings.Join(failed, "; "))
		}
		return nil
	})
}

func newAMQPQueuesCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "queues",
		Short: "List the AMQP queues of every broker: depth, unacked, consumers, counters",
		Long: `List each broker's AMQP queues: type and flags, the messages ready and
unacknowledged, consumers, how old the oldest unsettled message is (it holds
the CommitLog against retention: see docs/amqp.md), and since the broker
started the messages published, delivered, acknowledged and dead-lettered
or dropped (expired, over x-max-length, rejected or over x-delivery-limit
without a dead-letter exchange).`,
		Args: cobra.NoArgs,
		RunE: amqpAdmin(f, amqpQueuesTable),
	}
}

func newAMQPExchangesCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "exchanges",
		Short: "List the AMQP exchanges of every broker",
		Args:  cobra.NoArgs,
		RunE:  amqpAdmin(f, amqpExchangesTable),
	}
}

func amqpQueuesTable(w *tabwriter.Writer, out []admin.BrokerAMQP) {
	row(w, "BROKER", "VHOST", "QUEUE", "TYPE", "FLAGS", "READY", "UNACKED", "CONSUMERS", "OLDEST_UNSETTLED", "PUBLISHED", "DELIVERED", "ACKED", "DEAD_LETTERED", "DROPPED")
	for _, b := range out {
		if b.Err != "" {
			row(w, b.Broker, "ERROR: "+b.Err, "", "", "", "", "", "", "", "", "", "", "", "")
			continue
		}
		if !b.Enabled {
			fmt.Fprintf(w, "# %s: no AMQP listener\n", b.Broker)
			continue
		}
		for _, q := range b.Queues {
			age := "-"
			if q.OldestUnsettledAgeMs >= 0 {
				age = (time.Duration(q.OldestUnsettledAgeMs) * time.Millisecond).Round(time.Second).String()
			}
			row(w, b.Broker, q.Vhost, q.Name, q.Type, queueFlags(q), q.Ready, q.Unacked, q.Consumers, age,
				q.Published, q.Delivered, q.Acked, q.DeadLettered, q.Dropped)
		}
	}
}

// queueFlags renders a queue's flags and acted-on arguments: D durable,
// E exclusive, AD auto-delete, TTL, LIM (max length), DLX, DL (delivery
// limit).
func queueFlags(q admin.AMQPQueue) string {
	var f []string
	for _, c := range []struct {
		on   bool
		text string
	}{
		{q.Durable, "D"}, {q.Exclusive, "E"}, {q.AutoDelete, "AD"},
		{q.MessageTTLMs >= 0, fmt.Sprintf("TTL=%dms", q.MessageTTLMs)},
		{q.MaxLength >= 0, fmt.Sprintf("LIM=%d", q.MaxLength)},
		{q.DeliveryLimit >= 0, fmt.Sprintf("DL=%d", q.DeliveryLimit)},
		{q.DeadLetterExchange != "", "DLX=" + q.DeadLetterExchange},
	} {
		if c.on {
			f = append(f, c.text)
		}
	}
	if len(f) == 0 {
		return "-"
	}
	return strings.Join(f, ",")
}

func amqpExchangesTable(w *tabwriter.Writer, out []admin.BrokerAMQP) {
	row(w, "BROKER", "VHOST", "EXCHANGE", "TYPE", "DURABLE", "AUTO_DELETE", "INTERNAL", "BINDINGS")
	for _, b := range out {
		if b.Err != "" {
			row(w, b.Broker, "ERROR: "+b.Err, "", "", "", "", "", "")
			continue
		}
		if !b.Enabled {
			fmt.Fprintf(w, "# %s: no AMQP listener\n", b.Broker)
			continue
		}
		for _, e := range b.Exchanges {
			row(w, b.Broker, e.Vhost, e.Name, e.Type, e.Durable, e.AutoDelete, e.Internal, e.Bindings)
		}
	}
}

func newAMQPConnectionsCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "connections",
		Short: "List the open AMQP client connections of every broker",
		Args:  cobra.NoArgs,
		RunE:  amqpAdmin(f, amqpConnectionsTable),
	}
}

func amqpConnectionsTable(w *tabwriter.Writer, out []admin.BrokerAMQP) {
	row(w, "BROKER", "REMOTE", "USER", "VHOST", "CHANNELS", "SINCE")
	for _, b := range out {
		if b.Err != "" {
			row(w, b.Broker, "ERROR: "+b.Err, "", "", "", "")
			continue
		}
		if !b.Enabled {
			fmt.Fprintf(w, "# %s: no AMQP listener\n", b.Broker)
			continue
		}
		for _, c := range b.Connections {
			row(w, b.Broker, c.Remote, dash(c.User), dash(c.Vhost), c.Channels, fmtTime(time.UnixMilli(c.SinceMs)))
		}
	}
}
