package main

import (
	"debug/elf"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
)

// runWasm makes the table of a version family from a wasm32 build's DWARF,
// or with against compares the re-layout with an x86_64 build's DWARF.
func runWasm(file, version, pkg, against, outDir string, nopatch bool) error {
	l, unused, err := wasmLayout(file, version, nopatch, against != "")
	if err != nil {
		return err
	}
	for _, p := range unused {
		fmt.Fprintf(os.Stderr, "layoutgen: patch not used (no table field reaches it): %s\n", p)
	}
	if against != "" {
		var want *layout.Layout
		if against == "table" {
			if want = layouts.Committed(l.Family); want == nil {
				return fmt.Errorf("no built-in table for Ruby %s", l.Family)
			}
		} else if want, err = elfLayout(against, l.Family); err != nil {
			return err
		}
		diffs, offDiffs := compareLayouts(l, want)
		for _, d := range diffs {
			fmt.Println(d)
		}
		n, offs := comparable()
		fmt.Printf("%d of %d fields differ (%d of %d offset fields)\n", len(diffs), n, offDiffs, offs)
		if against != "table" {
			return crossCheckFile(file, version, against, nopatch)
		}
		return nil
	}
	if pkg == "" {
		pkg = "a wasm32-wasi Ruby"
	}
	from := fmt.Sprintf("%s (CRuby %s) DWARF re-laid out for x86_64", pkg, version)
	if err := write(l, from, outDir); err != nil {
		return err
	}
	return writeReleases(l.Family, l, from, outDir, func(ps []patch) (*relayout, error) {
		d, err := wasmDWARF(file)
		if err != nil {
			return nil, err
		}
		return newRelayout(d, wasm32, append(append([]patch(nil), familyPatches[l.Family]...), ps...))
	})
}

// wasmLayout re-lays out a wasm32 module's DWARF for x86_64 with the patch
// list of its version family; it also returns the patches that had no
// effect. A lenient one never fails (see buildLenient) and leaves macro
// fields zero.
func wasmLayout(file, version string, nopatch, lenient bool) (*layout.Layout, []string, error) {
	family := familyOf(version)
	if _, ok := familyPatches[family]; !ok && !nopatch {
		return nil, nil, fmt.Errorf("no wasm patch list for Ruby %s (add one to tools/layoutgen/patches.go)", family)
	}
	r, err := openRelayout(file, version, nopatch)
	if err != nil {
		return nil, nil, err
	}
	if lenient {
		return buildLenient(r, family), r.unusedPatches(), nil
	}
	l, err := layout.Build(r, family, "table")
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	l.Checked = version
	return l, r.unusedPatches(), nil
}

func familyOf(version string) string {
	parts := strings.Split(version, ".")
	if len(parts) < 2 {
		return version
	}
	return parts[0] + "." + parts[1]
}

// elfLayout reads the layout of an x86_64 Ruby build from its DWARF.
func elfLayout(image, family string) (*layout.Layout, error) {
	ef, err := elf.Open(image)
	if err != nil {
		return nil, err
	}
	defer ef.Close()
	d, err := ef.DWARF()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", image, err)
	}
	return layout.FromDWARF(d, family, "table")
}

// comparable counts the fields compareLayouts compares, and of them the
// offsets (off: tags).
func comparable() (n, offs int) {
	t := reflect.TypeOf(layout.Layout{})
	for i := 0; i < t.NumField(); i++ {
		if tag, ok := t.Field(i).Tag.Lookup("dwarf"); ok {
			n++
			if strings.HasPrefix(tag, "off:") {
				offs++
			}
		}
	}
	return n, offs
}

// compareLayouts lists the fields (those read from DWARF) where got and
// want differ, and counts the offsets among them.
func compareLayouts(got, want *layout.Layout) (out []string, offDiffs int) {
	gv, wv := reflect.ValueOf(*got), reflect.ValueOf(*want)
	for i := 0; i < gv.NumField(); i++ {
		sf := gv.Type().Field(i)
		tag, ok := sf.Tag.Lookup("dwarf")
		if !ok {
			continue
		}
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		if !reflect.DeepEqual(g, w) {
			out = append(out, fmt.Sprintf("%s (%s): re-layout %v, x86_64 %v", sf.Name, tag, g, w))
			if strings.HasPrefix(tag, "off:") {
				offDiffs++
			}
		}
	}
	return out, offDiffs
}

// buildLenient fills a layout as layout.Build does but never fails: a
// field no alternative resolves is -999 (-1 when optional or not the
// stack's, as Build makes it), to compare a whole table.
func buildLenient(r layout.Resolver, family string) *layout.Layout {
	l := &layout.Layout{Family: family, Source: "table"}
	v := reflect.ValueOf(l).Elem()
	for i := 0; i < v.NumField(); i++ {
		sf := v.Type().Field(i)
		tag, ok := sf.Tag.Lookup("dwarf")
		if !ok {
			continue
		}
		spec, optional := strings.CutSuffix(tag, ",optional")
		kind, whats, _ := strings.Cut(spec, ":")
		val := int64(-999)
		if optional || sf.Tag.Get("need") != "" {
			val = -1
		}
		for _, what := range strings.Split(whats, "|") {
			if x, err := r.Value(kind, what); err == nil {
				val = x
				break
			}
		}
		v.Field(i).SetInt(val)
	}
	return l
}

// openRelayout reads a wasm module's DWARF and makes its x86_64 re-layout
// with the patch list of version's family (none with nopatch).
func openRelayout(file, version string, nopatch bool) (*relayout, error) {
	d, err := wasmDWARF(file)
	if err != nil {
		return nil, err
	}
	var ps []patch
	if !nopatch {
		ps = familyPatches[familyOf(version)]
	}
	r, err := newRelayout(d, wasm32, ps)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return r, nil
}

// showWasm prints the x86_64 re-layout of the named types.
func showWasm(file, version, types string, nopatch bool) error {
	r, err := openRelayout(file, version, nopatch)
	if err != nil {
		return err
	}
	for _, name := range strings.Split(types, ",") {
		if err := r.show(name, func(f string, a ...any) { fmt.Printf(f, a...) }); err != nil {
			return err
		}
	}
	return nil
}

// crossCheckFile runs crossCheck of a wasm module against an x86_64 image
// and prints what differs.
func crossCheckFile(file, version, image string, nopatch bool) error {
	r, err := openRelayout(file, version, nopatch)
	if err != nil {
		return err
	}
	ef, err := elf.Open(image)
	if err != nil {
		return err
	}
	defer ef.Close()
	x86, err := ef.DWARF()
	if err != nil {
		return fmt.Errorf("%s: %w", image, err)
	}
	n, diffs, err := crossCheck(r, x86)
	if err != nil {
		return err
	}
	for _, d := range diffs {
		fmt.Printf("member %s: re-layout %s, x86_64 %s\n", d.path, d.got, d.want)
	}
	fmt.Printf("%d of %d members and sizes of the structs both builds have differ\n", len(diffs), n)
	return nil
}
