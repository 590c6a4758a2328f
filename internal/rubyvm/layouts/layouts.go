// Package layouts holds the built-in layout tables, one generated file per
// Ruby version family and architecture, for Rubies that carry no DWARF
// (such as Debian's stripped libruby). Regenerate a table with
// tools/layoutgen: ruby_X_Y.go are x86_64's, ruby_X_Y_aarch64.go another
// architecture's (the x86_64 DWARF re-laid out with its C library's
// types).
package layouts

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

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

// unchecked are, by family, the optional fields of a table made from a
// wasm build that no x86_64 process, core or other source of facts
// confirms, and that a wrong value would turn into a wrong decision rather
// than a failed check: For leaves them out (-1). None is left: the trap
// list (VMTrapCmd) of the 3.2 and 4.0 tables, once here, is where rbspy's
// bindings of 3.2.0 to 3.2.11 and 4.0.0 to 4.0.6, compiled for x86_64, put
// rb_vm_struct.trap_list, release by release (TestTrapListOffsets), and
// the 4.0.0 peer core holds an empty list there, after static_ext_inits'
// pointer.
var unchecked = map[string][]func(*layout.Layout) *int64{}

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

// A release is one or more patch releases of a family whose layout is the
// same: the fields where it differs from the family's table (none for the
// release the table was made from and those like it), and the changes of
// the structs that made them (tools/layoutgen/releases.go).
type release struct {
	releases []string
	fields   map[string]int64
	changes  []string
}

var releases = map[string][]release{}

func registerReleases(family string, rs []release) { releases[family] = rs }

// Releases lists the patch releases of family whose layout rbscope knows,
// oldest first.
func Releases(family string) []string {
	var out []string
	for _, r := range releases[family] {
		out = append(out, r.releases...)
	}
	return out
}

// ForRelease returns the layout of one patch release ("3.1.7"): its
// family's table with the fields that release moved. known is false for a
// release rbscope has no facts of; its layout is then the newest known
// release's when it is newer (a patch release rarely moves a field, and
// the checks at attach refuse one that did), else the family's table, and
// note says so in one line. It returns nil for a family without a table.
func ForRelease(version string) (l *layout.Layout, known bool, note string) {
	family, patch, ok := splitRelease(version)
	if !ok {
		return nil, false, ""
	}
	l = For(family)
	if l == nil {
		return nil, false, ""
	}
	rs := releases[family]
	if len(rs) == 0 {
		l.Release = version
		return l, false, fmt.Sprintf("rbscope knows no patch releases of Ruby %s: read with its %s table", family, l.Checked)
	}
	pick := -1
	for i, r := range rs {
		for _, x := range r.releases {
			if x == version {
				pick, known = i, true
			}
		}
	}
	if !known {
		rel := Releases(family)
		newest := rel[len(rel)-1]
		_, n, _ := splitRelease(newest)
		if patch > n {
			pick = len(rs) - 1
			note = fmt.Sprintf("Ruby %s is newer than the releases rbscope knows (%s to %s): read with %s's layout", version, rel[0], newest, newest)
		} else {
			note = fmt.Sprintf("Ruby %s is not a release rbscope knows (%s to %s): read with the %s table", version, rel[0], newest, l.Checked)
		}
	}
	if pick >= 0 {
		applyFields(l, rs[pick].fields)
	}
	l.Release = version
	return l, known, note
}

// Changes lists what release changed from its family's table, in the
// structs rbscope reads (none for the table's own release and those like
// it).
func Changes(version string) []string {
	family, _, ok := splitRelease(version)
	if !ok {
		return nil
	}
	for _, r := range releases[family] {
		for _, x := range r.releases {
			if x == version {
				return r.changes
			}
		}
	}
	return nil
}

// ReleaseFields returns the fields release moves from its family's table,
// by name (for tests and the generator's checks).
func ReleaseFields(version string) map[string]int64 {
	family, _, ok := splitRelease(version)
	if !ok {
		return nil
	}
	for _, r := range releases[family] {
		for _, x := range r.releases {
			if x == version {
				return r.fields
			}
		}
	}
	return nil
}

// applyFields sets l's named int64 fields; a name that is no field of the
// layout is a generator's bug, which TestReleases catches.
func applyFields(l *layout.Layout, fields map[string]int64) {
	v := reflect.ValueOf(l).Elem()
	for name, val := range fields {
		if f := v.FieldByName(name); f.IsValid() && f.Kind() == reflect.Int64 && f.Int() >= 0 {
			f.SetInt(val)
		}
	}
}

// splitRelease splits "3.1.7" into its family and patch number.
func splitRelease(version string) (family string, patch int, ok bool) {
	parts := strings.Split(version, ".")
	if len(parts) != 3 {
		return "", 0, false
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil {
		return "", 0, false
	}
	return parts[0] + "." + parts[1], n, true
}
