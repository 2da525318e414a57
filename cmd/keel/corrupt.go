package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/spf13/cobra"
)

func newCorruptCmd() *cobra.Command {
	f := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "corrupt",
		Short: "Inspect records isolated because they failed verification",
	}
	f.add(cmd)
	cmd.AddCommand(newCorruptListCmd(f))
	return cmd
}

func newCorruptListCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List isolated corrupt records and the scrubber's findings, per broker",
		Long: `List the records each broker's store withheld from consumers because they
failed verification twice (checksum, structure, or topic/queue/offset against
their ConsumeQueue entry): topic, queue, queue offset, CommitLog offset, size,
when and by what (a consumer's read or the background scrubber) they were
found, and why. Consumers continue after an isolated record; its bytes stay in
the CommitLog for inspection (keel check on a copy of the data directory).

Below the records, one line per broker gives the scrubber's rate, passes and
problems found since the broker started, and the reads whose bad bytes a
re-read corrected (read faults: the data on disk verifies).

A broker that does not answer is shown with its error and makes the command
exit non-zero after the others are listed.`,
		Args: cobra.NoArgs,
		RunE: adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
			out, err := c.IsolatedRecords(cmd.Context())
			if err != nil {
				return err
			}
			var failed []string
			for _, b := range out {
				if b.Err != "" {
					failed = append(failed, fmt.Sprintf("broker %s (%s): %s", b.Broker, b.Addr, b.Err))
				}
			}
			err = f.emit(cmd.OutOrStdout(), out, func(w *tabwriter.Writer) { corruptTable(w, out) })
			if err != nil {
				return err
			}
			if len(failed) > 0 {
				return fmt.Errorf("%s", strings.Join(failed, "; "))
			}
			return nil
		}),
	}
}

func corruptTable(w *tabwriter.Writer, out []admin.BrokerIntegrity) {
	row(w, "BROKER", "TOPIC", "QUEUE", "QUEUE_OFFSET", "COMMITLOG_OFFSET", "SIZE", "FOUND_AT", "FOUND_BY", "REASON")
	for _, b := range out {
		for _, r := range b.Records {
			topic, queue, qo := r.Topic, fmt.Sprint(r.QueueID), fmt.Sprint(r.QueueOffset)
			if r.QueueID < 0 {
				topic, queue, qo = "(unknown)", "-", "-"
			}
			row(w, b.Broker, topic, queue, qo, r.CommitLogOffset, r.Size, r.FoundAt.UTC().Format(time.RFC3339), r.FoundBy, r.Reason)
		}
		if b.Err != "" {
			row(w, b.Broker, "ERROR: "+b.Err, "", "", "", "", "", "", "")
		}
	}
	for _, b := range out {
		if b.Err != "" {
			continue
		}
		scrub := "scrubber off"
		if b.Scrub.BytesPerSecond > 0 {
			scrub = fmt.Sprintf("scrubber %d B/s, %d passes, %d problems", b.Scrub.BytesPerSecond, b.Scrub.Passes, b.Scrub.Problems)
		}
		fmt.Fprintf(w, "# %s: %d isolated, %s, %d read faults\n", b.Broker, len(b.Records), scrub, b.ReadFaults)
	}
}
