package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/spf13/cobra"
)

func newMsgCmd() *cobra.Command {
	f := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "msg",
		Short: "Get, query, tail and send messages",
	}
	f.add(cmd)
	cmd.AddCommand(newMsgGetCmd(f), newMsgQueryCmd(f), newMsgTailCmd(f), newMsgSendCmd(f))
	return cmd
}

func newMsgGetCmd(f *adminFlags) *cobra.Command {
	var topic, body string
	cmd := &cobra.Command{
		Use:   "get MSG_ID",
		Short: "Show a message by its id (the producer's msgId, or the offset msgId), with every stored copy",
		Args:  exactArgs(1, "MSG_ID"),
		RunE: adminRun(f, func(cmd *cobra.Command, args []string, c *admin.Client) error {
			if err := checkBodyMode(body); err != nil {
				return err
			}
			ms, err := c.GetMessage(cmd.Context(), args[0], topic)
			if err != nil {
				return err
			}
			return f.emit(cmd.OutOrStdout(), ms, func(w *tabwriter.Writer) {
				for i, m := range ms {
					if i > 0 {
						fmt.Fprintln(w)
					}
					printMessage(w, m, body)
				}
			})
		}),
	}
	cmd.Flags().StringVar(&topic, "topic", "", "topic to look the id up in (default: every topic)")
	cmd.Flags().StringVar(&body, "body", "text", "show the body as text, hex or none")
	return cmd
}

func checkBodyMode(m string) error {
	if m != "text" && m != "hex" && m != "none" {
		return usageError{fmt.Errorf("--body %q: want text, hex or none", m)}
	}
	return nil
}

func printMessage(w *tabwriter.Writer, m admin.Message, body string) {
	fmt.Fprintf(w, "Message ID:\t%s\n", m.MsgID)
	fmt.Fprintf(w, "Offset message ID:\t%s\n", m.OffsetMsgID)
	fmt.Fprintf(w, "Topic:\t%s\n", m.Topic)
	fmt.Fprintf(w, "Queue:\t%d, offset %d (CommitLog offset %d)\n", m.QueueID, m.QueueOffset, m.CommitLogOffset)
	fmt.Fprintf(w, "Tags:\t%s\n", dash(m.Tags))
	fmt.Fprintf(w, "Keys:\t%s\n", dash(m.Keys))
	fmt.Fprintf(w, "Born:\t%s from %s\n", fmtTime(m.BornTime), m.BornHost)
	fmt.Fprintf(w, "Stored:\t%s on %s\n", fmtTime(m.StoreTime), m.StoreHost)
	fmt.Fprintf(w, "Reconsume times:\t%d\n", m.ReconsumeTimes)
	keys := make([]string, 0, len(m.Properties))
	for k := range m.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "Property %s:\t%s\n", k, m.Properties[k])
	}
	fmt.Fprintf(w, "Body:\t%d bytes\n", m.BodyBytes)
	w.Flush() // the body is not part of the table
	switch body {
	case "text":
		fmt.Fprintln(w, bodyText(m))
	case "hex":
		fmt.Fprint(w, hex.Dump(m.Body))
	}
}

// bodyText is the body as text, or a hex dump if it is not UTF-8.
func bodyText(m admin.Message) string {
	if m.BodyBase64 != "" {
		return hex.Dump(m.Body)
	}
	return m.BodyText
}

func newMsgQueryCmd(f *adminFlags) *cobra.Command {
	var topic, key, begin, end string
	var maxNum int
	cmd := &cobra.Command{
		Use:   "query --topic TOPIC --key KEY",
		Short: "Find messages by key (KEYS) or unique key within a time range",
		Args:  cobra.NoArgs,
		RunE: adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
			if topic == "" || key == "" {
				return usageError{errors.New("msg query needs --topic and --key")}
			}
			now := time.Now()
			b, err := parseTime(begin, now)
			if err != nil {
				return usageError{fmt.Errorf("--begin: %w", err)}
			}
			e, err := parseTime(end, now)
			if err != nil {
				return usageError{fmt.Errorf("--end: %w", err)}
			}
			ms, err := c.QueryByKey(cmd.Context(), topic, key, b, e, maxNum)
			if err != nil {
				return err
			}
			if ms == nil {
				ms = []admin.Message{}
			}
			return f.emit(cmd.OutOrStdout(), ms, func(w *tabwriter.Writer) {
				row(w, "MSG_ID", "QUEUE", "OFFSET", "STORED", "TAGS", "KEYS", "BYTES")
				for _, m := range ms {
					row(w, m.MsgID, m.QueueID, m.QueueOffset, fmtTime(m.StoreTime), dash(m.Tags), dash(m.Keys), m.BodyBytes)
				}
			})
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&topic, "topic", "", "topic (required)")
	fl.StringVar(&key, "key", "", "message key (required)")
	fl.StringVar(&begin, "begin", "", "stored at or after: RFC 3339, \"2006-01-02 15:04:05\", Unix ms or a duration ago (2h)")
	fl.StringVar(&end, "end", "", "stored at or before (same forms)")
	fl.IntVar(&maxNum, "max", 64, "at most this many messages per broker")
	return cmd
}

func newMsgTailCmd(f *adminFlags) *cobra.Command {
	var topic string
	var fromStart bool
	var count int
	cmd := &cobra.Command{
		Use:   "tail --topic TOPIC",
		Short: "Print messages as they are stored in a topic (Ctrl-C to stop)",
		Args:  cobra.NoArgs,
		RunE: adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
			if topic == "" {
				return usageError{errors.New("msg tail needs --topic")}
			}
			out := cmd.OutOrStdout()
			if f.output == "table" {
				fmt.Fprintf(out, "%-23s  %-10s  %-32s  %-12s  %s\n", "STORED", "QUEUE:OFF", "MSG_ID", "TAGS", "BODY")
			}
			n := 0
			err := c.Tail(cmd.Context(), topic, fromStart, func(m admin.Message) error {
				if err := printTailLine(out, f.output, m); err != nil {
					return err
				}
				if n++; count > 0 && n >= count {
					return admin.ErrStop
				}
				return nil
			})
			if cmd.Context().Err() != nil {
				return nil // interrupted: a normal way to stop tailing
			}
			return err
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&topic, "topic", "", "topic (required)")
	fl.BoolVar(&fromStart, "from-beginning", false, "start with the oldest stored message instead of new ones")
	fl.IntVar(&count, "count", 0, "stop after this many messages (0: never)")
	return cmd
}

func printTailLine(w io.Writer, output string, m admin.Message) error {
	if output == "json" {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	body := m.BodyText
	if m.BodyBase64 != "" {
		body = "0x" + hex.EncodeToString(m.Body[:min(len(m.Body), 32)])
	}
	body = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(body)
	_, err := fmt.Fprintf(w, "%-23s  %-10s  %-32s  %-12s  %s\n", fmtTime(m.StoreTime),
		fmt.Sprintf("%d:%d", m.QueueID, m.QueueOffset), m.MsgID, dash(m.Tags), truncate(body, 100))
	return err
}

func newMsgSendCmd(f *adminFlags) *cobra.Command {
	var s admin.SendSpec
	var keys, props []string
	var body, file string
	cmd := &cobra.Command{
		Use:   "send --topic TOPIC (--body TEXT | -f FILE)",
		Short: "Send one message and print where it was stored",
		Args:  cobra.NoArgs,
		RunE: adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
			if s.Topic == "" {
				return usageError{errors.New("msg send needs --topic")}
			}
			var err error
			if s.Body, err = sendBody(cmd, body, file); err != nil {
				return err
			}
			s.Keys = keys
			if s.Properties, err = parseProps(props); err != nil {
				return err
			}
			res, err := c.Send(cmd.Context(), s)
			if err != nil && res.Status == "" {
				return err
			}
			if perr := f.emit(cmd.OutOrStdout(), res, func(w *tabwriter.Writer) {
				row(w, "STATUS", "MSG_ID", "OFFSET_MSG_ID", "BROKER", "QUEUE", "OFFSET")
				row(w, res.Status, res.MsgID, dash(res.OffsetMsgID), res.Broker, res.QueueID, res.QueueOffset)
			}); perr != nil {
				return perr
			}
			return err
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&s.Topic, "topic", "", "topic (required)")
	fl.StringVar(&s.Tags, "tag", "", "tag")
	fl.StringSliceVar(&keys, "keys", nil, "keys, comma separated")
	fl.StringVar(&body, "body", "", "message body")
	fl.StringVarP(&file, "file", "f", "", "read the body from a file (- for stdin)")
	fl.Int32Var(&s.QueueID, "queue", -1, "queue id (default: any writable queue)")
	fl.StringArrayVar(&props, "property", nil, "user property NAME=VALUE (repeatable)")
	return cmd
}

func sendBody(cmd *cobra.Command, body, file string) ([]byte, error) {
	switch {
	case file != "" && cmd.Flags().Changed("body"):
		return nil, usageError{errors.New("give --body or -f, not both")}
	case file == "-":
		return io.ReadAll(cmd.InOrStdin())
	case file != "":
		return os.ReadFile(file)
	case !cmd.Flags().Changed("body"):
		return nil, usageError{errors.New("msg send needs --body or -f")}
	}
	return []byte(body), nil
}

func parseProps(kvs []string) (map[string]string, error) {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--property %q: want NAME=VALUE", kv)}
		}
		out[k] = v
	}
	return out, nil
}
