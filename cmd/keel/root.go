package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1 // the command failed, or keel check found problems
	exitUsage    = 2 // bad flags or arguments
	exitProblems = exitError
)

// errProblems is returned by a command that ran to completion but found
// problems it already reported (keel check).
var errProblems = errors.New("problems found")

// usageError marks an error in the command line rather than in the work.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// run executes the command line args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errProblems):
		return exitProblems
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "keel: %v\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "keel: %v\n", err)
		return exitError
	}
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "keel",
		Short:         "Keel: a durable message broker speaking RocketMQ's protocol",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newServeCmd(),
		newNamesrvCmd(),
		newBrokerCmd(),
		newCheckCmd(),
		newVersionCmd(),
		newBenchCmd(),
		newTopicCmd(),
		newGroupCmd(),
		newMsgCmd(),
		newDLQCmd(),
		newTxnCmd(),
		newCorruptCmd(),
		newClusterCmd(),
		newAMQPCmd(),
		newControllerCmd(),
		newKafkaCmd(),
	)
	requireSubcommands(root)
	return root
}

// requireSubcommands walks the command tree so that a bad command line
// exits 2 everywhere. A command group (subcommands, no action of its own,
// the root included) refuses an unknown subcommand and suggests the nearest
// one (cobra would print the group's help and exit 0); given no
// subcommand it prints its help, as --help does. Every positional-argument
// check of a command reports a usage error, and one with subcommands (keel
// bench) suggests the nearest too.
func requireSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		requireSubcommands(sub)
	}
	c.SuggestionsMinimumDistance = 2
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = cobra.ArbitraryArgs
		// A flag of the misspelt subcommand must not hide the misspelling.
		c.FParseErrWhitelist.UnknownFlags = true
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return unknownCommand(cmd, args[0])
		}
		return
	}
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			err := check(cmd, args)
			switch {
			case err == nil || errors.As(err, new(usageError)):
				return err
			case cmd.HasSubCommands() && len(args) > 0:
				return unknownCommand(cmd, args[0])
			default:
				return usageError{err}
			}
		}
	}
}

// unknownCommand is the usage error for an unknown subcommand name.
func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usageError{fmt.Errorf("%s (see '%s --help')", msg, cmd.CommandPath())}
}
