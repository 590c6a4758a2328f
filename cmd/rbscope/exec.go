package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/rubyexec"
)

func newExecCmd() *cobra.Command {
	var pid int
	var timeout time.Duration
	var file string
	c := &cobra.Command{
		Annotations: map[string]string{stopsOnSignal: "yes"},
		Use:         "exec -p PID 'RUBY CODE'",
		Short:       "Run Ruby code inside a running process and print its result",
		Long: `Run Ruby code inside a running Ruby process, at a safe point (on a Ruby
thread holding the GVL, outside GC and signal handlers), and print the
inspect of its result, or the exception it raised (exit status 1).

The code runs with self the program's main object, in a fresh binding under
the top level: the program's top-level locals are visible, and the code's
own locals do not outlive it. What it prints goes to the process's own
stdout; the value is what rbscope prints. An exception never escapes into
the program.

rbscope borrows the main thread for a moment with ptrace to queue the code
as a VM postponed job (restoring every register afterwards), and reads the
answer from a pipe it makes inside the process (no file is written, so a
container's read-only or separate /tmp does not matter). If every Ruby
thread sleeps, it wakes the main thread with a SIGCHLD, which Ruby ignores
unless the program traps CHLD.

If the code has not started within --timeout, rbscope gives up and says so;
the queued request then does nothing if it runs later.`,
		Example: `  rbscope exec -p 4242 'Thread.list.map(&:name)'
  rbscope exec -p 4242 'GC.stat[:heap_live_slots]'
  rbscope exec -p 4242 -f script.rb`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{fmt.Errorf("give the code as one argument (quote it) (see 'rbscope exec --help')")}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if pid <= 0 {
				return usageError{fmt.Errorf("--pid is required (see 'rbscope exec --help')")}
			}
			code, err := execSource(args, file)
			if err != nil {
				return err
			}
			if timeout <= 0 {
				return usageError{fmt.Errorf("--timeout must be positive")}
			}
			res, err := runInProcess(c.Context(), pid, code, rubyexec.Options{Timeout: timeout})
			if err != nil {
				return err
			}
			if res.Raised != nil {
				printRaised(os.Stderr, res.Raised)
				return exitCode(1)
			}
			fmt.Println(res.Value)
			return nil
		},
	}
	c.Flags().IntVarP(&pid, "pid", "p", 0, "process ID of the Ruby process")
	durationFlag(c.Flags(), &timeout, "timeout", "", rubyexec.DefaultTimeout, "give up if the code has not finished within this time")
	c.Flags().StringVarP(&file, "file", "f", "", "read the code from this file ('-' for stdin) instead of the argument")
	return c
}

// execSource returns the code to run from the argument or --file.
func execSource(args []string, file string) (string, error) {
	switch {
	case file != "" && len(args) > 0:
		return "", usageError{fmt.Errorf("give the code either as an argument or with --file, not both")}
	case file == "-":
		b, err := io.ReadAll(os.Stdin)
		return string(b), err
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read the code: %w", err)
		}
		return string(b), nil
	case len(args) == 0 || strings.TrimSpace(args[0]) == "":
		return "", usageError{fmt.Errorf("no code to run: give it as an argument, e.g. rbscope exec -p PID 'GC.stat' (see 'rbscope exec --help')")}
	}
	return args[0], nil
}

// runInProcess attaches to pid and runs code in it.
func runInProcess(ctx context.Context, pid int, code string, opt rubyexec.Options) (*rubyexec.Result, error) {
	t, vm, closeAll, err := openRuby(pid)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	// Ctrl-C while waiting empties the queued request and cleans up, rather
	// than leaving it to run after rbscope has gone.
	opt.Cancel = ctx.Done()
	res, err := rubyexec.Run(t, vm, code, opt)
	if errors.Is(err, rubyexec.ErrCanceled) {
		fmt.Fprintln(os.Stderr, "rbscope:", err)
		return nil, interrupted(ctx)
	}
	return res, err
}

// printRaised prints an exception raised inside the process the way Ruby
// reports an uncaught one, keeping only the frames of the code itself.
func printRaised(w io.Writer, e *rubyexec.RubyError) {
	fmt.Fprintf(w, "rbscope: the code raised %s\n", e.Error())
	for _, line := range e.Backtrace {
		if strings.HasPrefix(line, "(rbscope") {
			fmt.Fprintf(w, "\tfrom %s\n", line)
		}
	}
}
