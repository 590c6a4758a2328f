package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/textsafe"
	"github.com/rbscope/rbscope/internal/wire"
)

func newStackCmd() *cobra.Command {
	var pid int
	var asJSON, nonblocking, native, lines bool
	c := &cobra.Command{
		Use:   "stack -p PID",
		Short: "Print every Ruby thread's stack right now",
		Long: `Print the Ruby stack of every Ruby thread of a running process, innermost
frame first (as Ruby's caller prints it). Ruby frames show label, path and the
line being run; C-method frames show Class#method (or Class.method).

The process is paused (ptrace) for the few milliseconds the read takes and
always resumed; --nonblocking reads without pausing it.`,
		Example: `  rbscope stack -p 4242
  rbscope stack -p 4242 --json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if pid <= 0 {
				return usageError{fmt.Errorf("--pid is required (see 'rbscope stack --help')")}
			}
			if native && nonblocking {
				return usageError{fmt.Errorf("--native needs the threads stopped to read their registers: drop --nonblocking")}
			}
			p, threads, err := readStacks(pid, stacks.Options{Native: native, Lines: lines, Nonblocking: nonblocking, Locks: true})
			if err != nil {
				return err
			}
			switch {
			case asJSON && native:
				return printJSON(wire.NewNativeStack(p, threads))
			case asJSON:
				return printJSON(wire.NewStack(p, threads))
			case native:
				printNativeStacks(os.Stdout, threads)
			default:
				printStacks(os.Stdout, threads)
			}
			return nil
		},
	}
	c.Flags().IntVarP(&pid, "pid", "p", 0, "process ID of the Ruby process")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: {pid, ruby_version, threads: [{tid, name, main, status, gvl, frames: [{kind, label, path, line}]}]}")
	c.Flags().BoolVar(&lines, "lines", false, "with --native: each native frame's source file and line, from DWARF where the code has it (reading debug information takes a while)")
	c.Flags().BoolVar(&nonblocking, "nonblocking", false, "read without pausing the process (a stack may be torn)")
	c.Flags().BoolVar(&native, "native", false, "show every native thread's native frames too (unwound with the code's CFI), Ruby frames beside the exec-loop frame that runs them, and each native frame's size; JSON frames of kind \"native\" carry function, object, offset, pc, frame_size")
	return c
}

// noteLayout says on stderr, in one line, when the built-in table was
// chosen for a patch release rbscope has no facts of.
func noteLayout(vm *rubyvm.VM) {
	if vm.LayoutNote != "" {
		fmt.Fprintf(os.Stderr, "rbscope: %s\n", vm.LayoutNote)
	}
}

// readStacks captures the stacks of process pid's threads.
func readStacks(pid int, opts stacks.Options) (wire.Process, []stacks.Thread, error) {
	t, vm, closeAll, err := openRuby(pid)
	if err != nil {
		return wire.Process{}, nil, err
	}
	defer closeAll()
	threads, err := stacks.Capture(t, vm, opts)
	if err != nil {
		return wire.Process{}, nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return wire.NewProcess(pid, vm), threads, nil
}

// printStacks prints Ruby threads' Ruby frames, as rbscope stack does.
func printStacks(w io.Writer, threads []stacks.Thread) {
	first := true
	for _, th := range threads {
		if !th.Ruby {
			continue
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		printThreadHeader(w, th)
		width := 0
		for _, f := range th.Frames {
			width = max(width, len(textsafe.Clean(f.Label)))
		}
		for _, f := range th.Frames {
			loc := "<cfunc>"
			if f.Kind == stacks.KindRuby {
				loc = fmt.Sprintf("%s:%d", textsafe.Clean(f.Path), f.Line)
			} else if f.Kind != stacks.KindCFunc {
				loc = "<unreadable>"
			}
			fmt.Fprintf(w, "  %-*s  %s\n", width, textsafe.Clean(f.Label), loc)
		}
		if th.Error != "" {
			fmt.Fprintf(w, "  (stack incomplete: %s)\n", textsafe.Clean(th.Error))
		}
	}
	printDeadlocks(w, threads)
}

// printDeadlocks prints a line for each cycle of the threads' waits,
// after a blank line.
func printDeadlocks(w io.Writer, threads []stacks.Thread) {
	for i, d := range stacks.Deadlocks(threads) {
		if i == 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, textsafe.Clean(d.String()))
	}
}

// printThreadHeader prints the line that opens a thread's stack: its name
// ("main" for the unnamed main thread; %q quotes what is not printable),
// "(native)" for a thread that runs no Ruby, its TID ("none" for an M:N
// thread on no native thread now), its Ruby status ("runnable" for a
// running thread without the GVL) and whether it holds the GVL.
func printThreadHeader(w io.Writer, th stacks.Thread) {
	name := th.Name
	if name == "" && th.Main {
		name = "main"
	}
	kind := ""
	if !th.Ruby {
		kind = " (native)"
	}
	t := fmt.Sprint(th.TID)
	if th.TID == 0 {
		t = "none"
	}
	fmt.Fprintf(w, "Thread %q%s tid=%s", name, kind, t)
	status := th.Status
	if status == "run" && !th.GVL {
		status = "runnable"
	}
	if status != "" {
		fmt.Fprintf(w, " status=%s", status)
	}
	if th.GVL {
		fmt.Fprint(w, " (holds GVL)")
	}
	fmt.Fprintln(w)
	for _, l := range stacks.LockLines(th) {
		fmt.Fprintf(w, "  - %s\n", textsafe.Clean(l))
	}
}
