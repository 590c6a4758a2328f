package main

import (
	"reflect"
	"testing"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
	"github.com/rbscope/rbscope/internal/testruby"
)

// debugBuilds lists the cached debug Rubies (their DWARF in libruby or the
// executable) by family, version and image.
func debugBuilds(t *testing.T) [][3]string {
	t.Helper()
	var out [][3]string
	for _, rb := range testruby.Rubies(t) {
		if rb.Stripped || testruby.Musl(rb) {
			continue
		}
		family, version, image, err := describe(rb.Bin)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, [3]string{family, version, image})
	}
	if len(out) == 0 {
		testruby.Missing(t, "no debug Ruby build in the cache (scripts/build-ruby.sh 3.1 makes one)")
	}
	return out
}

// TestArchRelayoutIsIdentity re-lays out each debug build's x86_64 DWARF
// for x86_64 itself, through the same code and with x86_64's C library
// types as the patches: the result must be the layout its DWARF gives,
// field for field (the rules, the packed structs, the typedef patches
// reproduce what the compiler did).
func TestArchRelayoutIsIdentity(t *testing.T) {
	for _, b := range debugBuilds(t) {
		family, version, image := b[0], b[1], b[2]
		t.Run(version, func(t *testing.T) {
			got, _, err := archLayout(image, family, version, arch.AMD64)
			if err != nil {
				t.Fatal(err)
			}
			want, err := elfLayout(image, family)
			if err != nil {
				t.Fatal(err)
			}
			diffs, _ := compareLayouts(got, want)
			for _, d := range diffs {
				t.Error(d)
			}
		})
	}
}

// TestArchTables regenerates the committed tables of other architectures
// from the debug builds of their families and compares.
func TestArchTables(t *testing.T) {
	for _, a := range arch.All {
		if a == arch.AMD64 {
			continue
		}
		for _, b := range debugBuilds(t) {
			family, version, image := b[0], b[1], b[2]
			want := layouts.CommittedArch(a, family)
			if want == nil || want.Checked != version {
				continue
			}
			t.Run(a.Name+"/"+version, func(t *testing.T) {
				got, unused, err := archLayout(image, family, version, a)
				if err != nil {
					t.Fatal(err)
				}
				if len(unused) > 0 {
					t.Errorf("patches without effect: %v", unused)
				}
				if !reflect.DeepEqual(got, want) {
					diffs, _ := compareLayouts(got, want)
					t.Errorf("the committed %s table of Ruby %s is stale (regenerate: go run ./tools/layoutgen -arch %s -ruby RUBY): %v", a.Name, family, a.Name, diffs)
				}
			})
		}
	}
}
