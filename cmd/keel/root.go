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
	)
	return root
}
