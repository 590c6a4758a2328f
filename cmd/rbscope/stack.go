package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/textsafe"
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
			if native {
				if nonblocking {
					return usageError{fmt.Errorf("--native needs the threads stopped to read their registers: drop --nonblocking")}
				}
				dump, err := readNativeStacks(pid, lines)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(os.Stdout, dump)
				}
				printNativeStacks(os.Stdout, dump)
				return nil
			}
			dump, err := readStacks(pid, !nonblocking)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(os.Stdout, dump)
			}
			printStacks(os.Stdout, dump)
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

// stackDump is the JSON document `rbscope stack --json` prints.
type stackDump struct {
	PID         int    `json:"pid"`
	RubyVersion string `json:"ruby_version"`
	Description string `json:"ruby_description"`
	Layout      string `json:"layout"`
	// LayoutAdjusted lists the layout offsets moved because the layout's
	// own failed their checks on this process ("VMObjspace 1232 -> 1248").
	LayoutAdjusted []string        `json:"layout_adjusted,omitempty"`
	Threads        []rubyvm.Thread `json:"threads"`
}

// noteAdjusted says on stderr which layout offsets rbscope had to move on
// this process beyond its family's known drifts (a patch release the
// built-in table was not made from); --json lists every move.
func noteAdjusted(vm *rubyvm.VM) {
	if u := vm.Unexpected(); len(u) > 0 {
		fmt.Fprintf(os.Stderr, "rbscope: Ruby %s: the %s layout failed its checks and was adjusted: %s\n", vm.Version, vm.Layout.Source, strings.Join(u, ", "))
	}
}

func readStacks(pid int, pause bool) (*stackDump, error) {
	t, vm, closeAll, err := openRuby(pid)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	var threads []rubyvm.Thread
	err = whilePaused(t, pause, func() (err error) {
		threads, err = vm.Threads()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	forkedMainTID(pid, threads)
	return &stackDump{PID: pid, RubyVersion: vm.Version, Description: vm.Description, Layout: vm.Layout.Source, Threads: threads}, nil
}

func printStacks(w io.Writer, d *stackDump) {
	for i, th := range d.Threads {
		if i > 0 {
			fmt.Fprintln(w)
		}
		printThreadHeader(w, th.Name, th.Main, true, th.TID, th.Status, th.GVL)
		width := 0
		for _, f := range th.Frames {
			width = max(width, len(textsafe.Clean(f.Label)))
		}
		for _, f := range th.Frames {
			loc := "<cfunc>"
			if f.Kind == rubyvm.KindRuby {
				loc = fmt.Sprintf("%s:%d", textsafe.Clean(f.Path), f.Line)
			} else if f.Kind != rubyvm.KindCFunc {
				loc = "<unreadable>"
			}
			fmt.Fprintf(w, "  %-*s  %s\n", width, textsafe.Clean(f.Label), loc)
		}
		if th.Error != "" {
			fmt.Fprintf(w, "  (stack incomplete: %s)\n", textsafe.Clean(th.Error))
		}
	}
}

// printThreadHeader prints the line that opens a thread's stack: its name
// ("main" for the unnamed main thread; %q quotes what is not printable),
// "(native)" for a thread that runs no Ruby, its TID ("none" for an M:N
// thread on no native thread now), its Ruby status ("runnable" for a
// running thread without the GVL) and whether it holds the GVL.
func printThreadHeader(w io.Writer, name string, main, ruby bool, tid int, status string, gvl bool) {
	if name == "" && main {
		name = "main"
	}
	kind := ""
	if !ruby {
		kind = " (native)"
	}
	t := fmt.Sprint(tid)
	if tid == 0 {
		t = "none"
	}
	fmt.Fprintf(w, "Thread %q%s tid=%s", name, kind, t)
	if status == "run" && !gvl {
		status = "runnable"
	}
	if status != "" {
		fmt.Fprintf(w, " status=%s", status)
	}
	if gvl {
		fmt.Fprint(w, " (holds GVL)")
	}
	fmt.Fprintln(w)
}

// forkedMainTID gives the main thread of threads, those of process pid,
// the kernel's TID where Ruby's books keep another: a forked child's main
// thread keeps its parent's TID there (a Puma or Unicorn worker's names
// its master's), and the kernel's is the process ID.
func forkedMainTID(pid int, threads []rubyvm.Thread) {
	for i := range threads {
		if th := &threads[i]; th.Main && th.TID != pid && !hasTask(pid, th.TID) {
			th.TID = pid
		}
	}
}

// hasTask reports whether tid is a thread of process pid.
func hasTask(pid, tid int) bool {
	if tid <= 0 {
		return false
	}
	_, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, tid))
	return err == nil
}
