package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/heapfile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/wire"
)

// censusTopClasses is how many class rows the text census prints without --all.
const censusTopClasses = 50

func newHeapCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "heap",
		Short: "Inspect the Ruby heap",
		Long: `Inspect the objects on a running Ruby process's GC heap (census, dump), and
analyse heap dumps in ObjectSpace.dump_all's JSON-lines format (diff, path,
top, suspects). Dumps are read plain or compressed with zstd or gzip, told
by their first bytes, not their names; a compressed dump cut short is
refused.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return usageError{fmt.Errorf("a subcommand is required: census, dump, diff, path or top (see 'rbscope heap --help')")}
		},
	}
	c.AddCommand(newHeapCensusCmd())
	c.AddCommand(newHeapDumpCmd())
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
				return printJSON(wire.NewHeapCensus(res.Census))
			}
			printCensus(os.Stdout, res, all)
			return nil
		},
	}
	c.Flags().IntVarP(&pid, "pid", "p", 0, "process ID of the Ruby process")
	c.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"schema_version", "classes": [{"type", "class", "count", "bytes"}, one per type and class]}`)
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
	printTable(w, []string{"TYPE", "COUNT", "BYTES"}, types, []bool{false, true, true})
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
	printTable(w, []string{"CLASS", "TYPE", "COUNT", "BYTES"}, classes, []bool{false, false, true, true})
	if len(rows) < len(c.ByClass) {
		fmt.Fprintf(w, "... %d more (--all prints every class)\n", len(c.ByClass)-len(rows))
	}
}

// printTable prints rows under a header, columns aligned: right[i] aligns
// column i right (numbers), the others left.
func printTable(w io.Writer, header []string, rows [][]string, right []bool) {
	width := make([]int, len(header))
	for _, r := range append([][]string{header}, rows...) {
		for i, cell := range r {
			width[i] = max(width[i], len(cell))
		}
	}
	for _, r := range append([][]string{header}, rows...) {
		var b strings.Builder
		for i, cell := range r {
			if i > 0 {
				b.WriteString("  ")
			}
			switch {
			case right[i]:
				fmt.Fprintf(&b, "%*s", width[i], cell)
			case i == len(r)-1:
				b.WriteString(cell)
			default:
				fmt.Fprintf(&b, "%-*s", width[i], cell)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

func newHeapDumpCmd() *cobra.Command {
	var pid int
	var outPath string
	var nonblocking, redact bool
	c := &cobra.Command{
		Use:   "dump -p PID -o FILE",
		Short: "Write every live object to FILE in ObjectSpace.dump_all's format",
		Long: `Walk every page of the Ruby GC heap and write each live object as one JSON
object per line, in the format of ObjectSpace.dump_all (address, type, class,
frozen, references, memsize, and per type: bytesize/value/encoding for
Strings, length for Arrays, size for Hashes, ivars for Objects, name for
classes and modules, superclass), after ROOT lines. 'rbscope heap diff/path/
top' and other dump_all tools read it.

References are what Ruby's GC marks from each object (its class left out,
as dump_all does): the core types exactly as dump_all writes them; classes'
superclass, instance and class variables, constants, method tables and call
caches; generic instance variables; Procs and Bindings through their
environments; Threads' fiber-locals and VM stacks; method entries,
instruction sequences (their literals, call data and inline caches), and
typed data of other kinds by a conservative scan of their struct. Words
found by a conservative scan are listed again in "conservative_references";
'rbscope heap path' goes through them only when nothing else holds the
object, and says so. A WeakMap's entries and a class's subclasses are
"weak_references". On 3.3+
the object shapes are written as SHAPE lines, as dump_all does.
Objects, classes and modules, and objects of other types with instance
variables, also carry "instance_variables", which dump_all lacks: each
instance variable's name and value, an object's address ("0x...") or an
immediate as Ruby inspects it ("5", "nil", ":sym", "1.5"), in order
(docs/json.md). Roots:
"vm" (the Thread objects, Object, BasicObject, Kernel, what the VM struct
holds), "global_tbl" (global variables), "global_symbols" (the symbol
table), "finalizers" and "machine_context" (what the threads' machine
stacks and registers point at).

The first ROOT line carries "dumped_by":"rbscope", and the last line is a
ROOT line "rbscope_end" with no references and "lines", the number of lines
before it: 'rbscope heap' and 'rbscope ui' refuse a dump of rbscope's that
lacks it as cut short, even when the cut fell between two lines; other
readers take it for a root that holds nothing.

The file is written under a temporary name and renamed when complete; a
path that cannot be written is refused before the process is touched.
A FILE named *.zst is written compressed with zstd (its fastest level, in
4 MiB frames with a seek table: 'rbscope ui' reads an object's line from
its frame), *.gz with gzip, as the dump is decoded; every 'rbscope heap'
command and 'rbscope ui' read them as plain dumps, and refuse one cut
short. Other compressors' suffixes (.xz, .bz2, .zstd) are refused. The
process stands still (ptrace) only while its writable memory is copied,
then runs again while the copy is decoded; the summary on stderr says how
long it stood still ("paused N ms") and how much was copied. A copy that
would not fit in the machine's available memory is refused before the
process stops: --nonblocking then walks the running process without a
copy, skipping (and counting) objects torn meanwhile. A one-line summary goes to stderr.`,
		Example: `  rbscope heap dump -p 4242 -o heap.json
  rbscope heap top heap.json
  rbscope heap dump -p 4242 -o heap.jsonl.zst   # compressed, about 15x smaller`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if pid <= 0 {
				return usageError{fmt.Errorf("--pid is required (see 'rbscope heap dump --help')")}
			}
			if outPath == "" {
				return usageError{fmt.Errorf("--output FILE is required (see 'rbscope heap dump --help')")}
			}
			if _, err := heap.CompressionOf(outPath); err != nil {
				return usageError{err}
			}
			return heapDump(pid, outPath, !nonblocking, redact)
		},
	}
	c.Flags().IntVarP(&pid, "pid", "p", 0, "process ID of the Ruby process")
	c.Flags().StringVarP(&outPath, "output", "o", "", "file to write the dump to (*.zst: zstd, *.gz: gzip)")
	c.Flags().BoolVar(&nonblocking, "nonblocking", false, "walk without pausing the process (objects changing meanwhile are skipped)")
	c.Flags().BoolVar(&redact, "redact-strings", false, "leave every String's contents out (its bytesize and encoding stay), for a dump that leaves the machine")
	return c
}

// budgetSpent is what a dump whose read budget ran out says.
const budgetSpent = "its read budget ran out: the process's objects claim far more memory than it holds (corrupt or hostile), and what could not be read is left out"

func heapDump(pid int, outPath string, pause, redact bool) error {
	o := heapfile.Options{Pause: pause, Redact: redact, VM: vmOptions}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		last := -1
		o.Progress = func(done, total int) {
			if pct := done * 100 / max(total, 1); pct != last {
				last = pct
				bar := strings.Repeat("#", pct/4) + strings.Repeat(".", 25-pct/4)
				fmt.Fprintf(os.Stderr, "\rdumping pid %d: [%s] %3d%% of %d heap pages", pid, bar, pct, total)
			}
		}
	}
	res, err := heapfile.Write(pid, outPath, o)
	if o.Progress != nil && res.Version != "" {
		fmt.Fprintln(os.Stderr)
	}
	if res.LayoutNote != "" {
		fmt.Fprintf(os.Stderr, "rbscope: %s\n", res.LayoutNote)
	}
	if err != nil {
		return err
	}
	st, ss, took := res.Stats, res.Snapshot, res.Took
	paused := fmt.Sprintf("paused %d ms to copy %d MB, decoded in %v", ss.Paused.Milliseconds(), ss.Bytes>>20, took.Round(time.Millisecond))
	if !pause {
		paused = fmt.Sprintf("not paused (took %v), %d objects skipped as torn", took.Round(time.Millisecond), st.Skipped)
	} else if st.Skipped > 0 {
		paused += fmt.Sprintf(", %d objects skipped as unreadable", st.Skipped)
	}
	if st.SkippedPages > 0 {
		paused += fmt.Sprintf(", %d heap pages unreadable", st.SkippedPages)
	}
	if st.BudgetSpent {
		paused += "; " + budgetSpent
	}
	for _, c := range st.Caveats() {
		paused += "; " + c
	}
	fmt.Fprintf(os.Stderr, "rbscope: wrote %s: %d objects and %d roots of pid %d (Ruby %s), %s; %s\n",
		outPath, st.Objects, st.Roots, pid, res.Version, heapfile.Size(st.Bytes, res.Compression, res.Stored), paused)
	return nil
}
