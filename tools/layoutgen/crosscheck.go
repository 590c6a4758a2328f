package main

import (
	"debug/dwarf"
	"fmt"
	"sort"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// structDiff is one member whose re-laid-out offset differs from an
// x86_64 build's DWARF.
type structDiff struct {
	path      string
	got, want string
}

// crossCheck compares every member (nested members included) of every
// named struct and union that both an x86_64 build's DWARF and the wasm
// module have, with the re-layout: far more than the layout table asks
// for. It returns the members compared and those that differ; a struct the
// re-layout cannot lay out counts once, as a difference.
func crossCheck(r *relayout, x86 *dwarf.Data) (int, []structDiff, error) {
	names := map[string]dwarf.Offset{}
	rd := x86.Reader()
	for {
		e, err := rd.Next()
		if err != nil {
			return 0, nil, err
		}
		if e == nil {
			break
		}
		switch e.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit:
			continue
		case dwarf.TagStructType, dwarf.TagUnionType:
			name, _ := e.Val(dwarf.AttrName).(string)
			decl, _ := e.Val(dwarf.AttrDeclaration).(bool)
			if _, seen := names[name]; name != "" && !decl && !seen {
				names[name] = e.Offset
			}
		}
		if e.Children {
			rd.SkipChildren()
		}
	}
	var sorted []string
	for n := range names {
		if _, ok := r.types[n]; ok {
			sorted = append(sorted, n)
		}
	}
	sort.Strings(sorted)
	n := 0
	var diffs []structDiff
	for _, name := range sorted {
		t, err := x86.Type(names[name])
		if err != nil {
			return 0, nil, err
		}
		st, ok := t.(*dwarf.StructType)
		if !ok {
			continue
		}
		if _, err := r.Value("size", name); err != nil {
			n++
			diffs = append(diffs, structDiff{path: name, got: err.Error(), want: "a layout"})
			continue
		}
		walkMembers(st, name, 0, func(path string, bit bool, off int64) {
			n++
			kind := "off"
			if bit {
				kind = "bitoff"
			}
			got, err := r.Value(kind, path)
			g := fmt.Sprint(got)
			if err != nil {
				g = "(" + err.Error() + ")"
			}
			if err != nil || got != off {
				diffs = append(diffs, structDiff{path: path, got: g, want: fmt.Sprint(off)})
			}
		})
		n++
		if got, _ := r.Value("size", name); got != st.Size() {
			diffs = append(diffs, structDiff{path: "sizeof " + name, got: fmt.Sprint(got), want: fmt.Sprint(st.Size())})
		}
	}
	return n, diffs, nil
}

// walkMembers calls f with each named member path of st and its offset
// (in bits for a bit-field) as layout's DWARF index computes it.
func walkMembers(st *dwarf.StructType, path string, base int64, f func(string, bool, int64)) {
	for _, m := range st.Field {
		p := path
		if m.Name != "" {
			p = path + "." + m.Name
		}
		if m.BitSize != 0 {
			if m.Name != "" {
				f(p, true, base*8+m.DataBitOffset)
			}
			continue
		}
		if m.Name != "" {
			f(p, false, base+m.ByteOffset)
		}
		if sub, ok := layout.StripType(m.Type).(*dwarf.StructType); ok && (sub.StructName == "" || m.Name == "") {
			walkMembers(sub, p, base+m.ByteOffset, f)
		}
	}
}
