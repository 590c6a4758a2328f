// Package layouts holds the built-in layout tables, one generated file per
// Ruby version family and architecture, for Rubies that carry no DWARF
// (such as Debian's stripped libruby). Regenerate a table with
// tools/layoutgen: ruby_X_Y.go are x86_64's, ruby_X_Y_aarch64.go another
// architecture's (the x86_64 DWARF re-laid out with its C library's
// types).
package layouts

import (
	"sort"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// byArch holds the tables by architecture name, then by family.
var byArch = map[string]map[string]*layout.Layout{}

// tables are x86_64's.
var tables = tablesOf(arch.AMD64)

func tablesOf(a *arch.Arch) map[string]*layout.Layout {
	if byArch[a.Name] == nil {
		byArch[a.Name] = map[string]*layout.Layout{}
	}
	return byArch[a.Name]
}

func register(l *layout.Layout) { tables[l.Family] = l }

// registerFor registers a table of the architecture named archName.
func registerFor(archName string, l *layout.Layout) {
	if byArch[archName] == nil {
		byArch[archName] = map[string]*layout.Layout{}
	}
	byArch[archName][l.Family] = l
}

// For returns the x86_64 table for a version family ("3.1"), or nil.
func For(family string) *layout.Layout { return ForArch(arch.AMD64, family) }

// ForArch returns architecture a's table for a version family, or nil.
func ForArch(a *arch.Arch, family string) *layout.Layout {
	if l, ok := tablesOf(a)[family]; ok {
		c := *l
		for _, f := range unchecked[family] {
			*f(&c) = -1
		}
		return &c
	}
	return nil
}

// Committed returns family's x86_64 table as generated and committed,
// without the fields For leaves out (for the generator's own checks), or
// nil.
func Committed(family string) *layout.Layout { return CommittedArch(arch.AMD64, family) }

// CommittedArch is Committed for architecture a.
func CommittedArch(a *arch.Arch, family string) *layout.Layout {
	if l, ok := tablesOf(a)[family]; ok {
		c := *l
		return &c
	}
	return nil
}

// unchecked are the optional fields of the tables made from a wasm build
// that no x86_64 process or core could confirm, and that a wrong value
// would turn into a wrong decision rather than a failed check: they are
// left out (-1). vm->trap_list lies after the VM's scheduler, which the
// wasm build lays out differently (4.0.0's cores put vm->objspace 16 bytes
// after the table's; on 4.0.0's peer core the table's trap list holds a
// pointer where no trap is set).
var unchecked = map[string][]func(*layout.Layout) *int64{
	"3.2": {func(l *layout.Layout) *int64 { return &l.VMTrapCmd }},
	"4.0": {func(l *layout.Layout) *int64 { return &l.VMTrapCmd }},
}

// Families lists the families that have an x86_64 table.
func Families() []string { return FamiliesFor(arch.AMD64) }

// FamiliesFor lists the families that have a table for architecture a.
func FamiliesFor(a *arch.Arch) []string {
	var fs []string
	for f := range tablesOf(a) {
		fs = append(fs, f)
	}
	sort.Strings(fs)
	return fs
}

// drifts are the known moves of fields between a family's patch releases,
// for tables made from one release and run on another.
var drifts = map[string][]layout.Drift{
	"3.1": {{
		Moves: map[string]int64{"VMObjspace": 8},
		Why:   "rb_vm_t grew by 8 bytes between 3.1.2 and 3.1.7",
	}},
	"3.2": {{
		Moves: map[string]int64{"VMObjspace": -16},
		Why:   "vm->objspace is at 1128 in 3.2.0 and 1144 in 3.2.4",
	}},
	// The 4.0 table comes from the wasm build, whose M:N scheduler structs
	// are assumed from 3.4's: on 4.0.0's x86_64 builds (the peer core) the
	// thread's status and name lie 8 bytes later, and vm->objspace 16.
	"4.0": {{
		Moves: map[string]int64{"ThreadStatusBit": 8, "ThreadName": 8},
		Why:   "4.0.0 on x86_64 keeps the thread's status and name 8 bytes after the wasm-made table's",
	}, {
		Moves: map[string]int64{"RactorVMListNode": 8, "RactorRunningEC": 8, "RactorThreadsMain": 8, "ThreadStatusBit": 16, "ThreadName": 16},
		Why:   "4.0.0 to 4.0.6 moved the ractor's vmlr_node, running_ec and threads.main and the thread's status and name by 8 more bytes",
	}, {
		Moves: map[string]int64{"VMObjspace": 16},
		Why:   "4.0.0 on x86_64 keeps vm->objspace 16 bytes after the wasm-made table's",
	}},
}

// Drifts lists the known drifts of a family's table, to try when the table
// fails its checks on a process.
func Drifts(family string) []layout.Drift { return drifts[family] }
