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

	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/textsafe"
	"github.com/rbscope/rbscope/internal/threads"
	"github.com/rbscope/rbscope/internal/wire"
)

func newThreadsCmd() *cobra.Command {
	var (
		pid                 int
		asJSON, nonblocking bool
		follow, poll        bool
		interval            time.Duration
	)
	c := &cobra.Command{
		Annotations: map[string]string{stopsOnSignal: "yes"},
		Use:         "threads -p PID",
		Short:       "Native and Ruby threads: TIDs, names, states, CPU, stacks; --follow for births and deaths",
		Long: `List every native thread of a Ruby process with its kernel state, CPU time,
CPU use over --interval and machine-stack bytes in use, joined with the Ruby
thread it runs: Thread#name, Ruby status, main or not, GVL holder, innermost
frame. Threads of Ruby's own (the timer thread) and native threads that run
no Ruby code are labelled as such.

--follow prints a line per thread birth and death as they happen, until
Ctrl-C or the process exits. Events come from the kernel's process-events
connector over netlink (no ptrace, nothing stopped); where netlink is not
permitted rbscope polls /proc/PID/task every 2 ms and says so.`,
		Example: `  rbscope threads -p 4242
  rbscope threads -p 4242 --follow`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if pid <= 0 {
				return usageError{fmt.Errorf("--pid is required (see 'rbscope threads --help')")}
			}
			if interval <= 0 || interval > time.Minute {
				return usageError{fmt.Errorf("--interval %v is out of range: give 1ms to 1m", interval)}
			}
			if follow {
				return followThreads(c.Context(), pid, asJSON, poll)
			}
			t, vm, closeAll, err := openRuby(pid)
			if err != nil {
				return err
			}
			defer closeAll()
			rows, err := threads.Read(c.Context(), t, vm, interval, !nonblocking)
			if errors.Is(err, context.Canceled) {
				return interrupted(c.Context())
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(wire.NewThreadTable(rows))
			}
			printThreadTable(os.Stdout, rows)
			return nil
		},
	}
	f := c.Flags()
	f.IntVarP(&pid, "pid", "p", 0, "process ID of the Ruby process")
	f.BoolVar(&asJSON, "json", false, "print JSON (with --follow: one JSON object per event)")
	f.BoolVar(&nonblocking, "nonblocking", false, "read without pausing the process (stack use only for blocked threads)")
	durationFlag(f, &interval, "interval", "", 200*time.Millisecond, "how long CPU use is measured over")
	f.BoolVar(&follow, "follow", false, "print thread births and deaths as they happen")
	f.BoolVar(&poll, "poll", false, "with --follow: poll /proc instead of using netlink")
	return c
}

func printThreadTable(w io.Writer, rows []threads.Row) {
	fmt.Fprintf(w, "%-8s %-16s %-9s %8s %6s %8s %8s  %-20s %-6s %-4s %s\n", "TID", "COMM", "STATE", "CPU", "CPU%", "STACK", "BIGFRAME", "RUBY THREAD", "STATUS", "GVL", "FRAME")
	for _, r := range rows {
		stack, big := "-", "-"
		if r.StackBytes != nil {
			stack = humanBytes(*r.StackBytes)
		}
		if r.LargestFrame != nil {
			big = humanBytes(r.LargestFrame.Bytes)
		}
		name, status, gvl, frame := "", "", "", ""
		switch r.Kind {
		case threads.KindRuby:
			name = r.Ruby.Name
			if r.Ruby.Main {
				if name == "" {
					name = "main"
				}
				name += " (main)"
			}
			if name == "" {
				name = "(unnamed)"
			}
			status = r.Ruby.Status
			if r.Ruby.GVL {
				gvl = "yes"
			}
			if f := r.Ruby.Frame; f != nil {
				frame = f.Label
				if f.Kind == stacks.KindRuby {
					frame += fmt.Sprintf(" (%s:%d)", f.Path, f.Line)
				}
			}
		case threads.KindRubyInternal:
			name = "[Ruby timer thread]"
		default:
			name = "[native, no Ruby]"
		}
		// A frame holding the thread's VM stack is large on every thread
		// but the main one (threads.LargestFrame); only what it holds
		// beyond that is unusual.
		if lf := r.LargestFrame; lf != nil && lf.Unusual() >= largeFrame {
			frame += "  [large native frame: " + lf.Function + "]"
		}
		fmt.Fprintf(w, "%-8d %-16s %-9s %7.2fs %5.1f%% %8s %8s  %-20s %-6s %-4s %s\n", r.TID, textsafe.Clean(r.Comm), r.State, r.CPUSeconds, r.CPUPercent, stack, big, textsafe.Clean(name), status, gvl, textsafe.Clean(frame))
	}
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

func followThreads(ctx context.Context, pid int, asJSON, poll bool) error {
	live, vm, closeAll, err := openRuby(pid)
	if err != nil {
		return err
	}
	defer closeAll()
	native, src, fallback := threads.Watch(ctx, pid, poll)
	if fallback != nil && !poll {
		fmt.Fprintf(os.Stderr, "rbscope: netlink process events unavailable (%v); polling /proc/%d/task every %v\n", fallback, pid, threads.PollInterval)
	}
	fmt.Fprintf(os.Stderr, "rbscope: following threads of pid %d (Ruby %s): native threads via %s, Ruby threads by reading the VM every %v; Ctrl-C to stop\n", pid, vm.Version, src, threads.RubyPollInterval)
	emit := func(ev threads.Event) {
		if asJSON {
			b, _ := wire.Versioned(wire.NewThreadEvent(ev)) // one JSON object per line
			fmt.Println(string(b))
			return
		}
		line := fmt.Sprintf("%s %-13s tid=%d", ev.Time.Format("15:04:05.000"), ev.Event, ev.TID)
		if ev.Name != "" {
			line += fmt.Sprintf(" %q", ev.Name)
		}
		if ev.Creator != "" {
			line += " created at " + ev.Creator
		}
		if strings.HasSuffix(ev.Event, "exited") && ev.Lifetime > 0 {
			line += fmt.Sprintf(" after %v", time.Duration(ev.Lifetime*float64(time.Second)).Round(time.Millisecond))
		}
		fmt.Println(line)
	}
	if threads.Follow(ctx, pid, stacks.NewReader(live, vm, stacks.ReaderOptions{}), native, emit) {
		fmt.Fprintf(os.Stderr, "rbscope: pid %d exited\n", pid)
	}
	return nil
}
