package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/wire"
)

// addHeapAnalyzeCmds adds the offline analyses of ObjectSpace.dump_all
// files (diff, path, top) to the heap command.
func addHeapAnalyzeCmds(c *cobra.Command) {
	c.AddCommand(newHeapDiffCmd(), newHeapSuspectsCmd(), newHeapPathCmd(), newHeapTopCmd())
}

// heapDumpArgs checks that a command got exactly its n positional arguments.
func heapDumpArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("want %s, got %d argument(s) (see '%s --help')", what, len(args), c.CommandPath())}
		}
		return nil
	}
}

// dumpPairOrThree checks that a command got two or three dump files.
func dumpPairOrThree(c *cobra.Command, args []string) error {
	if len(args) != 2 && len(args) != 3 {
		return usageError{fmt.Errorf("want two or three dump files, BEFORE AFTER [LATER], got %d argument(s) (see '%s --help')", len(args), c.CommandPath())}
	}
	return nil
}

func heapHex(a uint64) string { return fmt.Sprintf("%#x", a) }

func heapOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func newHeapDiffCmd() *cobra.Command {
	var by string
	var top int
	var asJSON bool
	c := &cobra.Command{
		Use:   "diff BEFORE AFTER [LATER]",
		Short: "What is new in one heap dump against an earlier one (ObjectSpace.dump_all files)",
		Long: `Compare two heap dumps in ObjectSpace.dump_all's JSON-lines format, taken from
the same process, and count the objects of AFTER that BEFORE lacks, grouped
by class (and type), largest first. An object whose address is in BEFORE
with another type or class (or, when both dumps have them, allocation site)
is new (the slot was freed and reused).

With a third dump LATER, taken after AFTER, the rows are the objects new in
AFTER that LATER still holds (as heapy does): what one window of work
allocated and kept past the next, which is what a leak looks like, without
what that window freed or what the latest one holds in flight.

--by site groups by allocation site (file:line) instead; dumps carry sites
when ObjectSpace.trace_object_allocations_start ran before the objects were
allocated. Bytes are each object's memsize as the dump reports it.

Dump a process's heap with:
  require "objspace"
  File.open("before.json", "w") { |f| ObjectSpace.dump_all(output: f) }`,
		Example: `  rbscope heap diff before.json after.json
  rbscope heap diff before.json after.json --by site --top 10
  rbscope heap diff one.json two.json three.json
  rbscope heap diff before.json after.json --json`,
		Args: dumpPairOrThree,
		RunE: func(c *cobra.Command, args []string) error {
			if by != "class" && by != "site" {
				return usageError{fmt.Errorf("--by %q: want class or site (see '%s --help')", by, c.CommandPath())}
			}
			if top < 0 {
				return usageError{fmt.Errorf("--top %d: want 0 (all) or more (see '%s --help')", top, c.CommandPath())}
			}
			a, b, err := loadDumpPair(args[0], args[1])
			if err != nil {
				return err
			}
			last, lastPath := b, args[1]
			var later *heap.Graph
			if len(args) == 3 {
				if later, err = heap.LoadFile(args[2]); err != nil {
					return err
				}
				last, lastPath = later, args[2]
			}
			if by == "site" && !last.HasSites() {
				return fmt.Errorf("%s has no allocation sites (file/line): dump after ObjectSpace.trace_object_allocations_start, or use --by class", lastPath)
			}
			var d *heap.DiffResult
			if later != nil {
				d = heap.Diff3(a, b, later)
			} else {
				d = heap.Diff(a, b)
			}
			rows, more := d.Rows(by, top)
			if asJSON {
				if later != nil {
					return printJSON(wire.NewHeapDiff3(wire.NewDumpInfo(args[0], a), wire.NewDumpInfo(args[1], b), wire.NewDumpInfo(args[2], later), d, by, rows, more))
				}
				return printJSON(wire.NewHeapDiff(wire.NewDumpInfo(args[0], a), wire.NewDumpInfo(args[1], b), d, by, rows, more))
			}
			w := os.Stdout
			fmt.Fprintf(w, "%s: %d objects, %d bytes\n", args[0], a.Len(), a.Bytes)
			fmt.Fprintf(w, "%s: %d objects, %d bytes\n", args[1], b.Len(), b.Bytes)
			if later != nil {
				fmt.Fprintf(w, "%s: %d objects, %d bytes\n", args[2], later.Len(), later.Bytes)
			}
			fmt.Fprintf(w, "new: %d objects, %d bytes (gone: %d objects, %d bytes)\n", d.NewObjects, d.NewBytes, d.GoneObjects, d.GoneBytes)
			if later != nil {
				fmt.Fprintf(w, "new in %s and still in %s: %d objects, %d bytes\n", args[1], args[2], d.KeptObjects, d.KeptBytes)
			}
			if by == "site" && d.SitesKnown < d.NewObjects {
				fmt.Fprintf(w, "%d new objects have no allocation site (allocated before tracing started, or internal)\n", d.NewObjects-d.SitesKnown)
			}
			fmt.Fprintln(w)
			var table [][]string
			for _, r := range rows {
				row := []string{heapOrNone(r.Class), r.Type, strconv.FormatUint(r.Count, 10), strconv.FormatUint(r.Bytes, 10)}
				if by == "site" {
					site := r.Site
					if site == "" {
						site = "(unknown)"
					}
					row = append([]string{site}, row...)
				}
				table = append(table, row)
			}
			if by == "site" {
				printTable(w, []string{"SITE", "CLASS", "TYPE", "COUNT", "BYTES"}, table, []bool{false, false, false, true, true})
			} else {
				printTable(w, []string{"CLASS", "TYPE", "COUNT", "BYTES"}, table, []bool{false, false, true, true})
			}
			if more > 0 {
				fmt.Fprintf(w, "... %d more (--top 0 prints all)\n", more)
			}
			return nil
		},
	}
	c.Flags().StringVar(&by, "by", "class", "group by class or by allocation site (site)")
	c.Flags().IntVar(&top, "top", 30, "print the largest N groups (0: all)")
	c.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"before", "after", "new_objects", "new_bytes", "gone_objects", "gone_bytes", "by", "rows": [{"class", "type", "site", "count", "bytes"}], "more_rows"}`)
	return c
}

func newHeapSuspectsCmd() *cobra.Command {
	var top int
	var asJSON bool
	c := &cobra.Command{
		Use:   "suspects BEFORE AFTER [LATER]",
		Short: "Where a heap grew between two dumps, by the object that keeps the new objects (leak suspects)",
		Long: `Compare two heap dumps of the same process (ObjectSpace.dump_all's JSON lines, or
rbscope heap dump's), BEFORE taken earlier, and find where AFTER grew: every
object of AFTER that BEFORE lacks is charged to its nearest dominator that
BEFORE has too, the holder, and the holders are ranked by the bytes of the
new objects they keep. A leak through a cache (a Hash in a constant, keyed
by request) shows as that Hash; one through a callback list as its Array.
Each suspect comes with its shortest path from the roots, the new objects
it keeps by class, and by allocation site when AFTER has sites (dumped
after ObjectSpace.trace_object_allocations_start).

Take the dumps some requests apart, after the application warmed up: what
a process allocates once (caches filled on first use) looks like growth
too between a cold and a warm dump. With a third dump LATER, the objects
charged are those new in AFTER that LATER still holds (as heap diff with
three dumps keeps them): what a window of work leaked, without what the
latest one holds in flight.`,
		Example: `  rbscope heap dump -p 4242 -o before.json; sleep 600; rbscope heap dump -p 4242 -o after.json
  rbscope heap suspects before.json after.json
  rbscope heap suspects before.json after.json --top 3 --json
  rbscope heap suspects one.json two.json three.json`,
		Args: dumpPairOrThree,
		RunE: func(c *cobra.Command, args []string) error {
			if top < 1 {
				return usageError{fmt.Errorf("--top %d: want 1 or more (see '%s --help')", top, c.CommandPath())}
			}
			a, b, err := loadDumpPair(args[0], args[1])
			if err != nil {
				return err
			}
			var doc *wire.HeapSuspects
			if len(args) == 3 {
				later, err := heap.LoadFile(args[2])
				if err != nil {
					return err
				}
				d := heap.Diff3(a, b, later)
				doc = wire.NewHeapSuspects3(wire.NewDumpInfo(args[0], a), wire.NewDumpInfo(args[1], b), wire.NewDumpInfo(args[2], later), later, d,
					heap.Suspects3(a, b, later, heap.Dominators(later), top))
			} else {
				doc = wire.NewHeapSuspects(wire.NewDumpInfo(args[0], a), wire.NewDumpInfo(args[1], b), b, heap.Diff(a, b), heap.Suspects(a, b, heap.Dominators(b), top))
			}
			if asJSON {
				return printJSON(doc)
			}
			printSuspects(os.Stdout, doc)
			return nil
		},
	}
	c.Flags().IntVar(&top, "top", 10, "print the N largest suspects")
	c.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"before", "after", "new_objects", "new_bytes", "suspects": [{"holder", "retained", "new_objects", "new_bytes", "classes", "sites", "path"}]} (docs/json.md)`)
	return c
}

// printSuspects prints heap suspects' text.
func printSuspects(w io.Writer, d *wire.HeapSuspects) {
	fmt.Fprintf(w, "%s: %d objects, %d bytes\n", d.Before.File, d.Before.Objects, d.Before.Bytes)
	fmt.Fprintf(w, "%s: %d objects, %d bytes\n", d.After.File, d.After.Objects, d.After.Bytes)
	if d.Later != nil {
		fmt.Fprintf(w, "%s: %d objects, %d bytes\n", d.Later.File, d.Later.Objects, d.Later.Bytes)
	}
	fmt.Fprintf(w, "new: %d objects, %d bytes\n", d.NewObjects, d.NewBytes)
	if d.KeptObjects != nil {
		fmt.Fprintf(w, "new in %s and still in %s: %d objects, %d bytes\n", d.After.File, d.Later.File, *d.KeptObjects, *d.KeptBytes)
	}
	for k, s := range d.Suspects {
		fmt.Fprintln(w)
		if s.Holder == nil {
			fmt.Fprintf(w, "%d. held by the roots directly: %d new objects, %d bytes\n", k+1, s.NewObjects, s.NewBytes)
		} else {
			h := s.Holder
			fmt.Fprintf(w, "%d. %s %s %s %s (retains %d bytes): %d new objects, %d bytes\n", k+1, h.Address, h.Type, heapOrNone(h.Class), h.Desc, s.Retained, s.NewObjects, s.NewBytes)
		}
		if s.Path != nil {
			hops := []string{"root " + s.Path.Root}
			for _, h := range s.Path.Hops {
				hops = append(hops, strings.TrimSpace(h.Type+" "+h.Class+" "+h.Desc))
			}
			fmt.Fprintf(w, "   path: %s\n", strings.Join(hops, " -> "))
		}
		// By site when the dump says (the rows name the class too), else
		// by class.
		head, right := []string{"CLASS", "TYPE", "COUNT", "BYTES"}, []bool{false, false, true, true}
		var rows [][]string
		for _, r := range s.Classes {
			rows = append(rows, []string{heapOrNone(r.Class), r.Type, strconv.FormatUint(r.Count, 10), strconv.FormatUint(r.Bytes, 10)})
		}
		if len(s.Sites) > 0 {
			head, right, rows = append([]string{"SITE"}, head...), append([]bool{false}, right...), nil
			for _, r := range s.Sites {
				site := r.Site
				if site == "" {
					site = "(unknown)"
				}
				rows = append(rows, []string{site, heapOrNone(r.Class), r.Type, strconv.FormatUint(r.Count, 10), strconv.FormatUint(r.Bytes, 10)})
			}
		}
		var b strings.Builder
		printTable(&b, head, rows, right)
		for _, line := range strings.SplitAfter(b.String(), "\n") {
			if line != "" {
				fmt.Fprint(w, "   ", line)
			}
		}
	}
}

// loadDumpPair loads the dumps BEFORE and AFTER of heap diff and heap
// suspects.
func loadDumpPair(before, after string) (*heap.Graph, *heap.Graph, error) {
	a, err := heap.LoadFile(before)
	if err != nil {
		return nil, nil, err
	}
	b, err := heap.LoadFile(after)
	if err != nil {
		return nil, nil, err
	}
	return a, b, nil
}

// parseHeapAddress parses an object address as dumps print it ("0x7f..."),
// the 0x optional.
func parseHeapAddress(s string) (uint64, error) {
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	a, err := strconv.ParseUint(h, 16, 64)
	if err != nil || a == 0 || h == "" {
		return 0, fmt.Errorf("bad address %q: want hexadecimal, like 0x7f3fa78f2058", s)
	}
	return a, nil
}

func newHeapPathCmd() *cobra.Command {
	var ignore []string
	var n int
	var asJSON bool
	c := &cobra.Command{
		Use:   "path DUMP ADDRESS",
		Short: "Who holds this object: the shortest path from the roots to it in a heap dump",
		Long: `Find how the roots reach an object of a heap dump (ObjectSpace.dump_all's
JSON lines): the shortest chain root -> holder -> ... -> object, each object
with its address, type, class and a short description (a String's value, an
Array's length, a Class's name...).

The roots are the dump's ROOT lines: vm (the VM's own references: classes,
threads, stacks), global_tbl (global variables), machine_context (the C
stack, scanned conservatively), global_list (C globals)... --all N prints up
to N paths, one per direct holder of the object, shortest first. An object
that no root reaches was garbage not yet collected when the dump was taken.`,
		Example: `  rbscope heap path heap.json 0x7f3fa78f2058
  rbscope heap path heap.json 0x7f3fa78f2058 --all 5 --json`,
		Args: heapDumpArgs(2, "a dump file and an object ADDRESS"),
		RunE: func(c *cobra.Command, args []string) error {
			addr, err := parseHeapAddress(args[1])
			if err != nil {
				return usageError{err}
			}
			if n < 1 {
				return usageError{fmt.Errorf("--all %d: want 1 or more (see '%s --help')", n, c.CommandPath())}
			}
			g, err := heap.LoadFile(args[0])
			if err != nil {
				return err
			}
			target, ok := g.Lookup(addr)
			if !ok {
				return fmt.Errorf("%#x is not in %s (%d objects): no object at that address when the dump was taken", addr, args[0], g.Len())
			}
			var skip []int
			for _, s := range ignore {
				a, err := parseHeapAddress(s)
				if err != nil {
					return usageError{fmt.Errorf("--ignore: %w", err)}
				}
				i, ok := g.Lookup(a)
				if !ok {
					return fmt.Errorf("--ignore %#x is not in %s: no object at that address when the dump was taken", a, args[0])
				}
				skip = append(skip, i)
			}
			paths := heap.PathsIgnoring(g, target, n, skip)
			holders := g.Holders(target)
			if asJSON {
				return printJSON(wire.NewHeapPath(g, target, holders, paths, skip))
			}
			w := os.Stdout
			h := g.Hop(target)
			fmt.Fprintf(w, "%#x: %s %s %s (%d bytes)\n", addr, h.Type, heapOrNone(h.Class), h.Desc, g.Memsize(target))
			fmt.Fprintf(w, "held by %d object(s)", len(holders))
			if len(paths) == 0 {
				fmt.Fprintln(w, "; not reachable from the roots (garbage not yet collected when the dump was taken)")
				return nil
			}
			fmt.Fprintln(w)
			for k, p := range paths {
				fmt.Fprintf(w, "\npath %d: %d objects from root %s\n", k+1, len(p.Hops), p.Root)
				var rows [][]string
				for _, h := range p.Hops {
					desc := h.Desc
					if h.Conservative {
						desc = "(conservative) " + desc
					}
					rows = append(rows, []string{heapHex(h.Address), h.Type, heapOrNone(h.Class), desc})
				}
				var b strings.Builder
				printTable(&b, []string{"ADDRESS", "TYPE", "CLASS", "DESC"}, rows, []bool{false, false, false, false})
				for _, line := range strings.SplitAfter(b.String(), "\n") {
					if line != "" {
						fmt.Fprint(w, "  ", line)
					}
				}
			}
			return nil
		},
	}
	c.Flags().IntVar(&n, "all", 1, "print up to N paths, one per holder, shortest first")
	c.Flags().StringSliceVar(&ignore, "ignore", nil, "find paths through none of these objects (addresses; repeat or separate with commas): what else holds it once they let go")
	c.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"address", "type", "class", "desc", "memsize", "holders", "paths": [{"root", "hops": [{"address", "type", "class", "desc", "memsize", "conservative"}]}]}`)
	return c
}

func newHeapTopCmd() *cobra.Command {
	var top int
	var asJSON bool
	c := &cobra.Command{
		Use:   "top DUMP",
		Short: "The objects that keep the most memory alive in a heap dump (dominators)",
		Long: `Compute the dominator tree of a heap dump (ObjectSpace.dump_all's JSON lines)
from its roots and print the objects with the largest retained size: the
memsize of every object reachable only through them, themselves included
(what freeing the object's last reference would free). COUNT is how many
objects that is, SELF the object's own memsize, DOMINATOR the object that
in turn retains it ("root" when no single object does).

Retainers nest: the Array that retains a Hash is listed above it with the
Hash's bytes included.`,
		Example: `  rbscope heap top heap.json
  rbscope heap top heap.json --top 50 --json`,
		Args: heapDumpArgs(1, "one dump file"),
		RunE: func(c *cobra.Command, args []string) error {
			if top < 1 {
				return usageError{fmt.Errorf("--top %d: want 1 or more (see '%s --help')", top, c.CommandPath())}
			}
			g, err := heap.LoadFile(args[0])
			if err != nil {
				return err
			}
			d := heap.Dominators(g)
			rs := d.Top(top)
			if asJSON {
				return printJSON(wire.NewHeapTop(args[0], g, d, rs))
			}
			w := os.Stdout
			fmt.Fprintf(w, "%s: %d objects, %d bytes; %d objects (%d bytes) reachable from the roots\n\n",
				args[0], g.Len(), g.Bytes, d.Reachable, d.ReachableBytes)
			var rows [][]string
			for _, r := range rs {
				rows = append(rows, []string{strconv.FormatUint(r.Retained, 10), strconv.FormatUint(r.Count, 10),
					strconv.FormatUint(r.Self, 10), heapHex(r.Address), r.Type, heapOrNone(r.Class), wire.Dominator(g, r), r.Desc})
			}
			printTable(w, []string{"RETAINED", "COUNT", "SELF", "ADDRESS", "TYPE", "CLASS", "DOMINATOR", "DESC"}, rows,
				[]bool{true, true, true, false, false, false, false, false})
			return nil
		},
	}
	c.Flags().IntVar(&top, "top", 20, "print the N largest retainers")
	c.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"file", "objects", "bytes", "reachable", "reachable_bytes", "retainers": [{"address", "type", "class", "desc", "memsize", "retained", "count", "dominator"}]}`)
	return c
}
