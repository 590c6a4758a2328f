// Command rbscope looks inside running, stuck or crashed Ruby processes from
// the outside: no gem, no restart, no patch to the Ruby VM.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/tempfiles"
	"github.com/rbscope/rbscope/internal/textsafe"
)

// stopsOnSignal is the annotation of the commands that end by themselves
// when the run's context is canceled (SIGINT, SIGTERM, SIGHUP).
const stopsOnSignal = "stops-on-signal"

// reloadsOnSIGHUP is the annotation of the commands that take SIGHUP as a
// request to re-read their configuration, not to end.
const reloadsOnSIGHUP = "reloads-on-sighup"

// interruptGrace is how long a command that does not watch the context
// has, after a signal, before rbscope exits.
const interruptGrace = 100 * time.Millisecond

// signalStatus is the exit status a signal's default action would have
// given (128 plus its number), for a run the signal ended.
func signalStatus(s os.Signal) exitCode {
	if n, ok := s.(syscall.Signal); ok {
		return exitCode(128 + int(n))
	}
	return exitCode(130)
}

// receivedSignal is the cause of the run's context when a signal ended it.
type receivedSignal struct{ os.Signal }

func (s receivedSignal) Error() string { return "received " + s.Signal.String() }

// interrupted is the status of a command the run's signal ended: 128 plus
// the signal's number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
func interrupted(ctx context.Context) exitCode {
	var s receivedSignal
	if errors.As(context.Cause(ctx), &s) {
		return signalStatus(s.Signal)
	}
	return exitCode(130)
}

// exitOnSignal ends rbscope on a signal with status code: it removes the
// temporary outputs, and a target that stands still is let go by the
// kernel as rbscope exits (once no injected call is under way).
func exitOnSignal(code exitCode) {
	target.PrepareExit()
	tempfiles.RemoveAll()
	os.Exit(int(code))
}

// usageError marks a mistake in the command line (exit status 2).
type usageError struct{ error }

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) (code int) {
	defer func() {
		if r := recover(); r != nil {
			// No target is stopped here: a target stands still only inside
			// a target.WhilePaused session, which lets it go on a panic.
			fmt.Fprintf(os.Stderr, "rbscope: internal error: %v (the target runs on)\n", r)
			if os.Getenv("RBSCOPE_TRACEBACK") != "" { // for a bug report
				os.Stderr.Write(debug.Stack())
			}
			code = 1
		}
	}()
	// main owns rbscope's signals. One context for the whole run: SIGINT,
	// SIGTERM and SIGHUP cancel it. Commands that watch it (annotated
	// stopsOnSignal) end as they should (record writes its output, exec
	// empties its request, alloc turns tracing off); any other is ended
	// after interruptGrace, as the signal would have ended it, its
	// temporary outputs removed. While a target stands still, rbscope exits
	// at once, and the kernel lets the target go (target.HoldsStopped);
	// SIGTSTP stops rbscope only once no target stands still (target.Stop).
	root := newRootCmd()
	root.SetArgs(args)
	cmd, _, findErr := root.Find(args)
	ends := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
	if findErr == nil && cmd.Annotations[reloadsOnSIGHUP] != "" {
		ends = ends[:2] // the command handles SIGHUP itself
		// Until it subscribes (signal.Notify undoes this), a SIGHUP would
		// kill the process with its default action: a reload asked early
		// must not end it.
		signal.Ignore(syscall.SIGHUP)
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, ends...)
	signal.Notify(signals, syscall.SIGTSTP)
	defer signal.Stop(signals)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-signals:
				if s == syscall.SIGTSTP {
					target.Stop()
					continue
				}
				cancel(receivedSignal{s})
				if target.HoldsStopped() {
					exitOnSignal(signalStatus(s))
				}
			case <-done:
				return
			}
		}
	}()
	if findErr == nil && cmd.Annotations[stopsOnSignal] == "" {
		go func() {
			<-ctx.Done()
			if context.Cause(ctx) == context.Canceled {
				return // the run ended by itself
			}
			time.Sleep(interruptGrace)
			exitOnSignal(interrupted(ctx))
		}()
	}
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ec exitCode
	if errors.As(err, &ec) {
		return int(ec) // a launched command's own status, already reported by it
	}
	fmt.Fprintln(os.Stderr, "rbscope:", textsafe.Clean(err.Error())) // errors name the target's files
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
	root.PersistentFlags().StringVar(&vmOptions.ForceVersion, "force-version", "",
		"assume this Ruby version (X.Y.Z) instead of reading it from the process or core")
	root.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		if v := vmOptions.ForceVersion; v != "" && !rubyvm.ValidVersion(v) {
			return usageError{fmt.Errorf("--force-version %q: want a Ruby version such as 3.3.0 (see '%s --help')", v, c.CommandPath())}
		}
		return nil
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())}
	})
	root.AddCommand(newStackCmd(), newRecordCmd(), newReportCmd(), newTopCmd(), newThreadsCmd(), newHeapCmd())
	root.AddCommand(newCrashCmd())
	root.AddCommand(newCoreCmd())
	root.AddCommand(newExecCmd(), newAllocCmd())
	root.AddCommand(newAgentCmd())
	root.AddCommand(newUICmd())
	addVersion(root)
	return root
}

// noArgs refuses positional arguments with a usage error.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unexpected argument %q (see '%s --help')", args[0], c.CommandPath())}
	}
	return nil
}
