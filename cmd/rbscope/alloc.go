package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/alloctrace"
	"github.com/rbscope/rbscope/internal/rubyexec"
	"github.com/rbscope/rbscope/internal/wire"
)

func newAllocCmd() *cobra.Command {
	var pid, top int
	var duration, timeout time.Duration
	var noGC, asJSON bool
	var by string
	c := &cobra.Command{
		Annotations: map[string]string{stopsOnSignal: "yes"},
		Use:         "alloc -p PID --duration D",
		Short:       "Which file:line:Type created objects during a window that are still alive",
		Long: `Turn Ruby's allocation tracing (ObjectSpace.trace_object_allocations) on
inside a running process, wait --duration, run a full GC (so garbage does not
show as retained; --no-gc skips it), and count the objects allocated during
the window that are still alive by the file, line and class that created
them, with their bytes (ObjectSpace.memsize_of), most objects first (then most bytes):

      1000   40000 B  test.rb:11:String
       100    4000 B  test.rb:7:String

Tracing is then turned off and its records cleared (unless the program was
tracing allocations itself before). The process runs on throughout; while
tracing is on its allocations are slower (bench/alloc.sh measures by how
much). The code runs inside the process as 'rbscope exec' runs it: it loads
Ruby's objspace extension, and keeps a sleeping "rbscope-alloc-watchdog"
thread during the window that turns tracing off by itself should rbscope be
killed. Ctrl-C ends the window early without a report.`,
		Example: `  rbscope alloc -p 4242 --duration 10s
  rbscope alloc -p 4242 --duration 1m --by class --top 20
  rbscope alloc -p 4242 --duration 5s --json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if pid <= 0 {
				return usageError{fmt.Errorf("--pid is required (see 'rbscope alloc --help')")}
			}
			if duration <= 0 {
				return usageError{fmt.Errorf("--duration must be positive, e.g. --duration 10s")}
			}
			if _, err := alloctrace.Group(nil, by); err != nil {
				return usageError{err}
			}
			rep, err := traceAllocations(c.Context(), pid, duration, timeout, !noGC)
			if err != nil {
				return err
			}
			sites, _ := alloctrace.Group(rep.Sites, by)
			if top > 0 && len(sites) > top {
				sites = sites[:top]
			}
			if asJSON {
				return printJSON(wire.NewAlloc(sites))
			}
			printAllocs(os.Stdout, pid, rep, sites, !noGC)
			return nil
		},
	}
	c.Flags().IntVarP(&pid, "pid", "p", 0, "process ID of the Ruby process")
	durationFlag(c.Flags(), &duration, "duration", "d", 10*time.Second, "how long to trace allocations")
	c.Flags().BoolVar(&noGC, "no-gc", false, "do not run a full GC at the end of the window (garbage not yet collected then counts as alive)")
	c.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"schema_version", "sites": [{"file", "line", "class", "count", "bytes"}]}`)
	c.Flags().IntVar(&top, "top", 0, "print only the N largest sites (0: all)")
	c.Flags().StringVar(&by, "by", "site", "group by file, line (file:line), class, or site (file:line:class)")
	durationFlag(c.Flags(), &timeout, "timeout", "", rubyexec.DefaultTimeout, "how long to wait for the process to reach a safe point, at each end of the window")
	return c
}

// traceAllocations runs one window in pid. Ctrl-C (or SIGTERM) ends it
// early: tracing is turned off, and rbscope exits without a report.
func traceAllocations(ctx context.Context, pid int, duration, timeout time.Duration, gc bool) (*alloctrace.Report, error) {
	t, vm, closeAll, err := openRuby(pid)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	sess, err := alloctrace.Start(t, vm, duration, timeout, gc)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "rbscope: tracing allocations in pid %d for %v...\n", pid, duration)
	select {
	case <-time.After(duration):
	case <-ctx.Done():
		if err := sess.Abort(); err != nil {
			return nil, fmt.Errorf("interrupted, and %w", err)
		}
		fmt.Fprintf(os.Stderr, "rbscope: interrupted; allocation tracing in pid %d is off again\n", pid)
		return nil, interrupted(ctx)
	}
	return sess.Stop()
}

// printAllocs prints memprof's table.
func printAllocs(w io.Writer, pid int, rep *alloctrace.Report, sites []alloctrace.Site, gc bool) {
	after := "after a full GC"
	if !gc {
		after = "without a GC (garbage not yet collected counts)"
	}
	fmt.Fprintf(w, "pid %d: %d objects (%s) allocated in %.1fs are alive %s\n\n", pid, rep.Objects, humanBytes(rep.Bytes), rep.Window.Seconds(), after)
	if len(sites) == 0 {
		return
	}
	fmt.Fprintf(w, "%9s %10s  %s\n", "count", "bytes", "site")
	for _, s := range sites {
		fmt.Fprintf(w, "%9d %10d  %s\n", s.Count, s.Bytes, s.Label())
	}
}
