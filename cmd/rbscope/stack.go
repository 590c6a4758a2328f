package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/rubyvm"
)

func newStackCmd() *cobra.Command {
	var pid int
	var asJSON, nonblocking bool
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
	c.Flags().BoolVar(&nonblocking, "nonblocking", false, "read without pausing the process (a stack may be torn)")
	return c
}

// stackDump is the JSON document `rbscope stack --json` prints.
type stackDump struct {
	PID         int             `json:"pid"`
	RubyVersion string          `json:"ruby_version"`
	Description string          `json:"ruby_description"`
	Layout      string          `json:"layout"`
	Threads     []rubyvm.Thread `json:"threads"`
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
	return &stackDump{PID: pid, RubyVersion: vm.Version, Description: vm.Description, Layout: vm.Layout.Source, Threads: threads}, nil
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printStacks(w io.Writer, d *stackDump) {
	for i, th := range d.Threads {
		if i > 0 {
			fmt.Fprintln(w)
		}
		name := th.Name
		if name == "" && th.Main {
			name = "main"
		}
		status := th.Status
		if status == "run" && !th.GVL {
			status = "runnable"
		}
		fmt.Fprintf(w, "Thread %q tid=%d status=%s", name, th.TID, status)
		if th.GVL {
			fmt.Fprint(w, " (holds GVL)")
		}
		fmt.Fprintln(w)
		width := 0
		for _, f := range th.Frames {
			width = max(width, len(f.Label))
		}
		for _, f := range th.Frames {
			loc := "<cfunc>"
			if f.Kind == rubyvm.KindRuby {
				loc = fmt.Sprintf("%s:%d", f.Path, f.Line)
			} else if f.Kind != rubyvm.KindCFunc {
				loc = "<unreadable>"
			}
			fmt.Fprintf(w, "  %-*s  %s\n", width, f.Label, loc)
		}
		if th.Error != "" {
			fmt.Fprintf(w, "  (stack incomplete: %s)\n", th.Error)
		}
	}
}
