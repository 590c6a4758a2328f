package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/corefile"
	"github.com/rbscope/rbscope/internal/crash"
	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/heapfile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/rubyvm/heapdump"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/textsafe"
	"github.com/rbscope/rbscope/internal/wire"
)

func newCoreCmd() *cobra.Command {
	var opts target.CoreOptions
	var asJSON, census, all, native, lines, heapDumpFlag, redact bool
	var outPath string
	c := &cobra.Command{
		Use:   "core CORE",
		Short: "Print every Ruby thread's stack from a core dump",
		Long: `Read an ELF core file of a Ruby process (written by the kernel when it
crashed, or by gdb's gcore) and print every Ruby thread's stack as 'rbscope
stack' does; --census adds the heap census of 'rbscope heap census'.

Memory the core does not hold (program text and read-only data, which the
kernel leaves out) is read from the files the process had mapped, at the
paths the core records. When a file is not on this machine (or differs), its
ELF image is read from the core itself and, if need be, the VM is found by
scanning the Ruby image's data. When no string of the image says the Ruby
release (the core lacks its read-only data), the release is proven from the
process's heap (RUBY_VERSION, or RbConfig at the process's RUBY_PATCHLEVEL,
read with each family's table that fits; a file's name is only a hint) or
the core is refused; --force-version gives it on your word. A line on
stderr says so.
--sysroot DIR names a directory holding the crashed machine's files at the
same paths (DIR/usr/lib/...), and --exe PATH the executable; --core-only
reads no file of this machine.`,
		Example: `  rbscope core /var/crash/core.4242
  rbscope core core.4242 --census
  rbscope core core.4242 --sysroot ./crashed-root --json
  rbscope core core-from-elsewhere --force-version 3.3.0`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("one core file is required (see '%s --help')", c.CommandPath())}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if heapDumpFlag {
				if outPath == "" {
					return usageError{fmt.Errorf("--heap-dump needs -o FILE (see 'rbscope core --help')")}
				}
				if native || census {
					return usageError{fmt.Errorf("--heap-dump is read alone: drop --native and --census")}
				}
				if _, err := heap.CompressionOf(outPath); err != nil {
					return usageError{err}
				}
				return coreHeapDump(args[0], opts, outPath, redact)
			}
			if native {
				if census {
					return usageError{fmt.Errorf("--native and --census are read one at a time: run rbscope core twice")}
				}
				d, threads, err := readCoreNative(args[0], opts, lines)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(d)
				}
				printCoreInfo(os.Stdout, d.CoreInfo, d.PID, d.RubyVersion)
				if d.Fault != "" {
					fmt.Fprintf(os.Stdout, "fault: %s\n", textsafe.Clean(d.Fault))
				}
				fmt.Fprintln(os.Stdout)
				printNativeStacks(os.Stdout, threads)
				return nil
			}
			d, err := readCore(args[0], opts, census)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(d.doc)
			}
			printCoreInfo(os.Stdout, d.doc.CoreInfo, d.doc.PID, d.doc.RubyVersion)
			fmt.Fprintln(os.Stdout)
			printStacks(os.Stdout, d.threads)
			if d.census != nil {
				fmt.Fprintln(os.Stdout)
				printCensus(os.Stdout, d.census, all)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&opts.Exe, "exe", "", "the executable to use instead of the path the core records")
	f.StringVar(&opts.Sysroot, "sysroot", "", "directory holding the crashed machine's files at their paths")
	f.BoolVar(&opts.CoreOnly, "core-only", false, "read no file of this machine: take every mapped file's image from the core, as for a core from elsewhere")
	f.BoolVar(&asJSON, "json", false, "print JSON: rbscope stack's document plus core, command, signal, signal_tid (and census with --census)")
	f.BoolVar(&census, "census", false, "also count the heap's live objects by type and class")
	f.BoolVar(&heapDumpFlag, "heap-dump", false, "write every live object to -o FILE in ObjectSpace.dump_all's format, as 'rbscope heap dump' does")
	f.StringVarP(&outPath, "output", "o", "", "with --heap-dump: the file to write (*.zst: zstd, *.gz: gzip)")
	f.BoolVar(&redact, "redact-strings", false, "with --heap-dump: leave every String's contents out (bytesize and encoding stay)")
	f.BoolVar(&lines, "lines", false, "with --native: each native frame's source file and line, from DWARF where the code has it")
	f.BoolVar(&native, "native", false, "show every thread's native frames too, unwound with the code's CFI, as 'rbscope stack --native' does, and the fault beneath a signal handler")
	f.BoolVar(&all, "all", false, fmt.Sprintf("with --census: print every class, not only the largest %d", censusTopClasses))
	return c
}

func newCoreInfo(path string, t *target.Core) wire.CoreInfo {
	comm, args := t.Command()
	if args == "" {
		args = comm
	}
	c := wire.CoreInfo{Core: path, Command: args}
	if sig, tid := t.Signal(); sig > 0 {
		c.Signal, c.SignalTID = crash.SignalName(sig), tid
	}
	return c
}

// printCoreInfo writes the line that opens rbscope core's text output.
func printCoreInfo(w io.Writer, c wire.CoreInfo, pid int, rubyVersion string) {
	fmt.Fprintf(w, "core %s: pid %d (%s)", textsafe.Clean(c.Core), pid, textsafe.Clean(c.Command))
	if c.Signal != "" {
		fmt.Fprintf(w, ", signal %s in tid %d", c.Signal, c.SignalTID)
	}
	fmt.Fprintf(w, ", Ruby %s\n", rubyVersion)
}

// coreRead is what rbscope core read: its document, the threads it
// prints, and the census with --census.
type coreRead struct {
	doc     *wire.Core
	threads []stacks.Thread
	census  *censusResult
}

// openCore opens a core and the Ruby VM it holds, saying on stderr what
// the core lacks and how the VM was found when not the ordinary way. The
// returned close releases both.
func openCore(path string, opts target.CoreOptions) (*target.Core, *rubyvm.VM, func(), error) {
	c, err := corefile.Open(path, opts, vmOptions, func(note string) { fmt.Fprintln(os.Stderr, "rbscope:", note) })
	if err != nil {
		return nil, nil, nil, err
	}
	return c.Core, c.VM, c.Close, nil
}

func readCore(path string, opts target.CoreOptions, census bool) (*coreRead, error) {
	t, vm, closeAll, err := openCore(path, opts)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	threads, err := stacks.Capture(t, vm, stacks.Options{})
	if err != nil {
		return nil, coreError(t, err)
	}
	d := &coreRead{threads: threads, doc: &wire.Core{CoreInfo: newCoreInfo(path, t)}}
	if census {
		start := time.Now()
		c, err := vm.HeapCensus()
		if err != nil {
			return nil, coreError(t, fmt.Errorf("heap census: %w", err))
		}
		d.census = &censusResult{PID: t.PID(), RubyVersion: vm.Version, Census: c, Took: time.Since(start)}
		rows := c.ByClass
		if rows == nil {
			rows = []rubyvm.CensusRow{}
		}
		census := wire.NewCensusRows(rows)
		d.doc.Census = &census
	}
	noteLayout(vm)
	d.doc.Stack = *wire.NewStack(wire.NewProcess(t.PID(), vm), threads)
	return d, nil
}

// coreHeapDump writes the heap of the process a core holds, as heap dump
// writes a live one's.
func coreHeapDump(path string, opts target.CoreOptions, outPath string, redact bool) error {
	out, err := heapfile.Create(outPath) // refused before the core is read
	if err != nil {
		return err
	}
	defer out.Abort()
	t, vm, closeAll, err := openCore(path, opts)
	if err != nil {
		return err
	}
	defer closeAll()
	vm.PrepareHeapDump()
	st, err := heapdump.Write(vm, out, heapdump.Options{RedactStrings: redact, MachineContext: true})
	if err != nil {
		return coreError(t, fmt.Errorf("heap dump: %w", err))
	}
	if err := out.Commit(); err != nil {
		return err
	}
	noteLayout(vm)
	skipped := ""
	if st.Skipped > 0 || st.SkippedPages > 0 {
		skipped = fmt.Sprintf("; %d objects and %d heap pages unreadable (not in the core?)", st.Skipped, st.SkippedPages)
	}
	if st.BudgetSpent {
		skipped += "; " + budgetSpent
	}
	for _, c := range st.Caveats() {
		skipped += "; " + c
	}
	fmt.Fprintf(os.Stderr, "rbscope: wrote %s: %d objects and %d roots of pid %d (Ruby %s) from core %s, %s%s\n",
		outPath, st.Objects, st.Roots, t.PID(), vm.Version, path, heapfile.Size(st.Bytes, out.Compression, out.Stored()), skipped)
	return nil
}

// readCoreNative reads a core's Ruby stacks and every thread's native
// stack, from the registers its notes hold.
func readCoreNative(path string, opts target.CoreOptions, lines bool) (*wire.CoreNative, []stacks.Thread, error) {
	t, vm, closeAll, err := openCore(path, opts)
	if err != nil {
		return nil, nil, err
	}
	defer closeAll()
	threads, err := stacks.Capture(t, vm, stacks.Options{Native: true, Lines: lines})
	if err != nil {
		return nil, nil, coreError(t, err)
	}
	d := &wire.CoreNative{CoreInfo: newCoreInfo(path, t)}
	if sig, tid := t.Signal(); sig > 0 {
		for _, th := range threads {
			if th.TID == tid {
				d.Fault = crash.Fault(th.NativeFrames(), sig)
			}
		}
	}
	noteLayout(vm)
	d.NativeStack = *wire.NewNativeStack(wire.NewProcess(t.PID(), vm), threads)
	return d, threads, nil
}

// coreError names the core and says what to do about missing files
// (corefile.Error).
func coreError(t *target.Core, err error) error { return corefile.Error(t, err) }
