// Package layouts holds the built-in layout tables, one generated file per
// Ruby version family, for Rubies that carry no DWARF (such as Debian's
// stripped libruby). Regenerate a table with tools/layoutgen.
package layouts

import (
	"sort"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

var tables = map[string]*layout.Layout{}

func register(l *layout.Layout) { tables[l.Family] = l }

// For returns the table for a version family ("3.1"), or nil.
func For(family string) *layout.Layout {
	if l, ok := tables[family]; ok {
		c := *l
		return &c
	}
	return nil
}

// Families lists the families that have a table.
func Families() []string {
	var fs []string
	for f := range tables {
		fs = append(fs, f)
	}
	sort.Strings(fs)
	return fs
}
