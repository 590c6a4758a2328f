package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/rubyvm"
)

// censusTopClasses is how many class rows the text census prints without --all.
const censusTopClasses = 50

func newHeapCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "heap",
		Short: "Inspect the Ruby heap",
		Long: `Inspect the objects on a running Ruby process's GC heap (census), and analyse
heap dumps in ObjectSpace.dump_all's JSON-lines format (diff, path, top).`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return usageError{fmt.Errorf("a subcommand is required: census, diff, path or top (see 'rbscope heap --help')")}
		},
	}
	c.AddCommand(newHeapCensusCmd())
	addHeapAnalyzeCmds(c)
	return c
}

func newHeapCensusCmd() *cobra.Command {
	var pid int
	var asJSON, nonblocking, all bool
	c := &cobra.Command{
		Use:   "census -p PID",
		Short: "Count live objects by type and by class, with their bytes",
		Long: `Walk every page of the Ruby GC heap and count the live objects by type
(as ObjectSpace.count_objects does) and by class (obj.class), with the bytes
they take, largest first.

Bytes are each object's slot (40 bytes, or its size pool's slot size on Ruby
3.2+) plus, for Strings and Arrays whose contents do not fit in the slot, the
capacity of their malloc'd buffer (shared buffers are counted once, by their
owner). Other types count their slot only: hash tables, instance-variable
tables, T_DATA payloads and the like are not included.

Objects that are garbage but not yet swept (the GC sweeps lazily) are counted
as live, as ObjectSpace.count_objects counts them.

The process is paused (ptrace) for the walk and always resumed;
--nonblocking walks without pausing it (counts may then be torn).`,
		Example: `  rbscope heap census -p 4242
  rbscope heap census -p 4242 --all
  rbscope heap census -p 4242 --json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if pid <= 0 {
				return usageError{fmt.Errorf("--pid is required (see 'rbscope heap census --help')")}
			}
			res, err := readCensus(pid, !nonblocking)
			if err != nil {
				return err
			}
			if asJSON {
				rows := res.Census.ByClass
				if rows == nil {
					rows = []rubyvm.CensusRow{}
				}
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			printCensus(os.Stdout, res, all)
			return nil
		},
	}
	c.Flags().IntVarP(&pid, "pid", "p", 0, "process ID of the Ruby process")
	c.Flags().BoolVar(&asJSON, "json", false, `print JSON: a list of {"type", "class", "count", "bytes"}, one per type and class`)
	c.Flags().BoolVar(&all, "all", false, fmt.Sprintf("print every class, not only the largest %d", censusTopClasses))
	c.Flags().BoolVar(&nonblocking, "nonblocking", false, "walk without pausing the process (counts may be torn)")
	return c
}

// censusResult is a census and what it was taken from.
type censusResult struct {
	PID         int
	RubyVersion string
	Census      *rubyvm.Census
	Took        time.Duration
}

func readCensus(pid int, pause bool) (*censusResult, error) {
	t, vm, closeAll, err := openRuby(pid)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	var census *rubyvm.Census
	var took time.Duration
	err = whilePaused(t, pause, func() (err error) {
		start := time.Now()
		census, err = vm.HeapCensus()
		took = time.Since(start)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return &censusResult{PID: pid, RubyVersion: vm.Version, Census: census, Took: took}, nil
}

func printCensus(w io.Writer, r *censusResult, all bool) {
	c := r.Census
	fmt.Fprintf(w, "pid %d, Ruby %s: %d live objects, %d bytes, on %d heap pages (%d slots, %d free) in %v\n",
		r.PID, r.RubyVersion, c.Objects, c.Bytes, c.Pages, c.Slots, c.Free, r.Took.Round(time.Millisecond))
	if c.Zombies > 0 || c.Moved > 0 {
		fmt.Fprintf(w, "not counted: %d zombies (awaiting finalizers), %d moved-object forwarders\n", c.Zombies, c.Moved)
	}
	if c.SkippedPages > 0 {
		fmt.Fprintf(w, "warning: %d heap pages could not be read (freed during the walk?)\n", c.SkippedPages)
	}
	fmt.Fprintln(w)
	types := make([][]string, 0, len(c.ByType))
	for _, row := range c.ByType {
		types = append(types, []string{row.Type, fmt.Sprint(row.Count), fmt.Sprint(row.Bytes)})
	}
	printTable(w, []string{"TYPE", "COUNT", "BYTES"}, types, 1)
	fmt.Fprintln(w)
	rows := c.ByClass
	if !all && len(rows) > censusTopClasses {
		rows = rows[:censusTopClasses]
	}
	classes := make([][]string, 0, len(rows))
	for _, row := range rows {
		name := row.Class
		if name == "" {
			name = "(hidden)"
		}
		classes = append(classes, []string{name, row.Type, fmt.Sprint(row.Count), fmt.Sprint(row.Bytes)})
	}
	printTable(w, []string{"CLASS", "TYPE", "COUNT", "BYTES"}, classes, 2)
	if len(rows) < len(c.ByClass) {
		fmt.Fprintf(w, "... %d more (--all prints every class)\n", len(c.ByClass)-len(rows))
	}
}

// printTable prints rows under a header, the first left columns aligned
// left and the others (numbers) right.
func printTable(w io.Writer, header []string, rows [][]string, left int) {
	width := make([]int, len(header))
	for i, h := range header {
		width[i] = len(h)
	}
	for _, r := range rows {
		for i, cell := range r {
			width[i] = max(width[i], len(cell))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, cell := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			if i < left {
				if i == len(cells)-1 {
					b.WriteString(cell)
				} else {
					fmt.Fprintf(&b, "%-*s", width[i], cell)
				}
			} else {
				fmt.Fprintf(&b, "%*s", width[i], cell)
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
}
