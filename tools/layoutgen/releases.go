package main

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// A change is what some patch releases of a family changed, relative to
// the release the family's table is made from, in the structs rbscope
// reads: members added, removed or retyped, as patches over the table's
// source DWARF (after the family's wasm patches, for a table made from a
// wasm build). The facts come from each release's own headers (rbspy's
// bindgen bindings of every release, ruby-structs/src/ruby_X_Y_Z.rs, and
// the OpenTelemetry eBPF profiler's per-release Ruby offsets).
type change struct {
	from, to string // the first and last release it applies to ("" = the newest known)
	patches  []patch
}

// releaseFacts lists, per family, the patch releases rbscope knows of (the
// newest last) and what each range of them changed. A release with no
// change has the family table's layout.
type releaseFacts struct {
	releases []string
	changes  []change
}

var families = map[string]releaseFacts{
	"2.7": {
		releases: seq("2.7", 0, 8), // no release moved a field rbscope reads
	},
	"3.1": {
		releases: seq("3.1", 0, 7),
		changes: []change{
			{from: "3.1.0", to: "3.1.0", patches: []patch{
				drop("rb_method_definition_struct", "no_redef_warning", "3.1.0 has no no_redef_warning bit (added in 3.1.1)"),
			}},
			{from: "3.1.5", patches: []patch{
				insert("rb_vm_struct", "loaded_features_realpaths", "3.1.5 added the VM's loaded_features_realpath_map",
					members("loaded_features_realpath_map u64")...),
			}},
		},
	},
	"3.2": {
		releases: seq("3.2", 0, 11),
		changes: []change{
			{from: "3.2.0", to: "3.2.2", patches: []patch{
				drop("rb_vm_struct", "loaded_features_realpath_map", "added in 3.2.3"),
				drop("rb_method_definition_struct", "no_redef_warning", "3.2.0 to 3.2.2's bit-fields: type, iseq_overload, alias_count:27, complemented_count:28, no_redef_warning"),
				drop("rb_method_definition_struct", "aliased", "3.2.0 to 3.2.2 count aliases instead"),
				drop("rb_method_definition_struct", "reference_count", "3.2.0 to 3.2.2 count aliases and complements instead"),
				insert("rb_method_definition_struct", "iseq_overload", "3.2.0 to 3.2.2's counts",
					members("alias_count int:27; complemented_count int:28; no_redef_warning u32:1")...),
			}},
			{from: "3.2.0", to: "3.2.3", patches: []patch{
				drop("rb_vm_struct", "static_ext_inits", "added in 3.2.4"),
			}},
			{from: "3.2.7", patches: []patch{
				insert("rb_vm_struct", "constant_cache", "3.2.7 added the VM's inserting_constant_cache_id",
					members("inserting_constant_cache_id u64")...),
			}},
		},
	},
	"3.3": {
		// 3.3.11 named the type of rb_thread_sched_item.waiting_reason
		// (struct rb_thread_sched_waiting), moving nothing
		releases: seq("3.3", 0, 12),
		changes: []change{
			{from: "3.3.0", to: "3.3.0", patches: []patch{
				drop("rb_vm_struct", "ci_table", "added in 3.3.1"),
			}},
			{from: "3.3.0", to: "3.3.6", patches: []patch{
				drop("rb_vm_struct", "inserting_constant_cache_id", "added in 3.3.7"),
			}},
		},
	},
	"3.4": {
		// 3.4.0 and 3.4.1 differ in iseq_compile_data only, which
		// rbscope does not read. 3.4.11 moved nothing rbscope reads:
		// rbspy's bindings end at 3.4.10 and the OpenTelemetry profiler
		// gives all of 3.4 one layout, so it was checked on Debian's
		// binary (docs/rubies.md): read with this table, it passes the
		// matrix, and glibc's blocks of its rb_vm_t, rb_thread_t and
		// rb_ractor_t are the table's sizes; but its Mutex holds a word
		// more, after its owning fiber (a held Mutex's words there, read
		// with Fiddle: the fiber, a pointer, then next_mutex and the wait
		// queue; 3.4.5's: the fiber, next_mutex, the wait queue), which
		// TestLocks found: no owner proven and no Mutex held on 3.4.11.
		// Which release between 3.4.6 and 3.4.11 added it is not known
		// here: only 3.4.11 is said to have it (on those before it, the
		// owner checks name no owner rather than a wrong one).
		releases: seq("3.4", 0, 11),
		changes: []change{
			{from: "3.4.11", patches: []patch{
				insert("rb_mutex_struct", "fiber", "3.4.11's Mutex has a word after its owning fiber (read on Debian's binary)",
					members("after_fiber ptr")...),
			}},
		},
	},
	"4.0": {
		releases: seq("4.0", 0, 6),
		changes: []change{
			{from: "4.0.4", patches: []patch{
				retype("rb_classext_struct", "cvc_tbl", "u64", "4.0.4 keeps the class variable cache as a VALUE"),
				retype("rb_classext_struct", "subclasses", "ptr", "4.0.4 points at the list's first rb_subclass_entry, not an anchor (same offset)"),
				drop("rb_classext_struct", "box_super_subclasses", "4.0.4 renamed it subclass_entry"),
				drop("rb_classext_struct", "box_module_subclasses", "4.0.4 renamed it module_subclass_entry"),
				insert("rb_classext_struct", "subclasses", "4.0.4's subclass entries",
					members("subclass_entry ptr; module_subclass_entry ptr")...),
			}},
			{from: "4.0.6", patches: []patch{
				insert("rb_vm_struct", "special_exceptions", "4.0.6 added the VM's master_box",
					members("master_box ptr")...),
				insert("rb_thread_sched", "running", "4.0.6 added the scheduler's hot thread",
					members("runnable_hot_th ptr; runnable_hot_th_waiting int")...),
				schedItem40("4.0.6 added is_ready to a thread's scheduler node, after readyq",
					"ubf ccan_list_node; readyq ccan_list_node; is_ready bool; timeslice_threads ccan_list_node; running_threads ccan_list_node; zombie_threads ccan_list_node"),
			}},
		},
	},
}

// seq lists the releases family.first to family.last.
func seq(family string, first, last int) []string {
	var out []string
	for i := first; i <= last; i++ {
		out = append(out, family+"."+strconv.Itoa(i))
	}
	return out
}

// patchNum is a release's patch number (3.1.7 -> 7).
func patchNum(release string) int {
	parts := strings.Split(release, ".")
	n, _ := strconv.Atoi(parts[len(parts)-1])
	return n
}

// patchesFor lists the release patches that apply to release.
func (f releaseFacts) patchesFor(release string) []patch {
	n := patchNum(release)
	var out []patch
	for _, c := range f.changes {
		if n < patchNum(c.from) || (c.to != "" && n > patchNum(c.to)) {
			continue
		}
		out = append(out, c.patches...)
	}
	return out
}

// releaseLayout is one group of consecutive releases whose layout is the
// same: the fields that differ from the family's table, and the patches
// that made them.
type releaseLayout struct {
	releases []string
	fields   map[string]int64
	changes  []string
}

// releaseLayouts makes each known release's layout of family with open
// (a relayout of the table's source with the given release patches) and
// returns the groups of releases, in order, with the fields that differ
// from base.
func releaseLayouts(family string, base *layout.Layout, open func([]patch) (*relayout, error)) ([]releaseLayout, error) {
	facts, ok := families[family]
	if !ok {
		return nil, nil
	}
	// The re-layout without a release's patches must give the table
	// itself, field for field: what it then moves is the patches' doing.
	r, err := open(nil)
	if err != nil {
		return nil, err
	}
	same, err := layout.Build(r, family, "table")
	if err != nil {
		return nil, err
	}
	if d := differingFields(base, same); len(d) > 0 {
		return nil, fmt.Errorf("the re-layout of the Ruby %s table's own source differs from it: %v", family, d)
	}
	var out []releaseLayout
	for _, rel := range facts.releases {
		ps := facts.patchesFor(rel)
		fields := map[string]int64{}
		var changes []string
		if len(ps) > 0 {
			r, err := open(ps)
			if err != nil {
				return nil, fmt.Errorf("Ruby %s: %w", rel, err)
			}
			l, err := layout.Build(r, family, "table")
			if err != nil {
				return nil, fmt.Errorf("Ruby %s: %w", rel, err)
			}
			for _, p := range ps {
				changes = append(changes, p.String()+" ("+p.why+")")
			}
			unused := map[string]bool{}
			for _, u := range r.unusedPatches() {
				unused[u] = true
			}
			for _, p := range ps {
				if unused[p.String()] {
					return nil, fmt.Errorf("Ruby %s: the patch %s reaches no struct the table reads", rel, p)
				}
			}
			fields = differingFields(base, l)
		}
		if n := len(out); n > 0 && reflect.DeepEqual(out[n-1].fields, fields) && reflect.DeepEqual(out[n-1].changes, changes) {
			out[n-1].releases = append(out[n-1].releases, rel)
			continue
		}
		out = append(out, releaseLayout{releases: []string{rel}, fields: fields, changes: changes})
	}
	return out, nil
}

// differingFields lists the int64 fields of l that differ from base.
func differingFields(base, l *layout.Layout) map[string]int64 {
	out := map[string]int64{}
	bv, lv := reflect.ValueOf(base).Elem(), reflect.ValueOf(l).Elem()
	for i := 0; i < bv.NumField(); i++ {
		if bv.Field(i).Kind() != reflect.Int64 {
			continue
		}
		if b, x := bv.Field(i).Int(), lv.Field(i).Int(); b != x {
			out[bv.Type().Field(i).Name] = x
		}
	}
	return out
}

// renderReleases writes the Go source of a family's release layouts.
func renderReleases(family string, groups []releaseLayout, from string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by tools/layoutgen from %s and the release facts of tools/layoutgen/releases.go; DO NOT EDIT.\n\n", from)
	fmt.Fprintf(&b, "package layouts\n\nfunc init() {\n\tregisterReleases(%q, []release{\n", family)
	for _, g := range groups {
		fmt.Fprintf(&b, "\t\t{releases: %#v", g.releases)
		if len(g.fields) > 0 {
			names := make([]string, 0, len(g.fields))
			for n := range g.fields {
				names = append(names, n)
			}
			sort.Strings(names)
			b.WriteString(", fields: map[string]int64{")
			for _, n := range names {
				fmt.Fprintf(&b, "%q: %d, ", n, g.fields[n])
			}
			b.WriteString("}")
		}
		if len(g.changes) > 0 {
			fmt.Fprintf(&b, ", changes: %#v", g.changes)
		}
		b.WriteString("},\n")
	}
	b.WriteString("\t})\n}\n")
	return format.Source(b.Bytes())
}

// writeReleases makes and writes a family's release layouts into outDir.
func writeReleases(family string, base *layout.Layout, from, outDir string, open func([]patch) (*relayout, error)) error {
	groups, err := releaseLayouts(family, base, open)
	if err != nil || groups == nil {
		return err
	}
	src, err := renderReleases(family, groups, from)
	if err != nil {
		return err
	}
	name := filepath.Join(outDir, "releases_"+strings.ReplaceAll(family, ".", "_")+".go")
	if err := os.WriteFile(name, src, 0o644); err != nil {
		return err
	}
	fmt.Println(name)
	return nil
}
