// Command rbscope looks inside running, stuck or crashed Ruby processes from
// the outside: no gem, no restart, no patch to the Ruby VM.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/target"
)

// usageError marks a mistake in the command line (exit status 2).
type usageError struct{ error }

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) (code int) {
	defer func() {
		if r := recover(); r != nil {
			target.ResumeAll()
			fmt.Fprintf(os.Stderr, "rbscope: internal error: %v (the target was resumed)\n", r)
			code = 1
		}
	}()
	root := newRootCmd()
	root.SetArgs(args)
	err := root.Execute()
	target.ResumeAll()
	if err == nil {
		return 0
	}
	var ec exitCode
	if errors.As(err, &ec) {
		return int(ec) // a launched command's own status, already reported by it
	}
	fmt.Fprintln(os.Stderr, "rbscope:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "rbscope",
		Short: "Look inside running Ruby processes from the outside",
		Long: `rbscope reads a running Ruby process from the outside: no gem, no restart,
no patch to the Ruby VM. It reads memory with process_vm_readv and pauses the
process only as long as a consistent read needs (always resuming it).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())}
	})
	root.AddCommand(newStackCmd(), newRecordCmd(), newTopCmd(), newThreadsCmd(), newHeapCmd())
	root.AddCommand(newCrashCmd())
	root.AddCommand(newCoreCmd())
	root.AddCommand(newExecCmd(), newAllocCmd())
	return root
}

// exactArgs is cobra.ExactArgs with a usage error.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unexpected argument %q (see '%s --help')", args[0], c.CommandPath())}
	}
	return nil
}
