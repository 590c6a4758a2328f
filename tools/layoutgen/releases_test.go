package main

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
)

// checkReleases compares the release layouts made from a table's source
// (open re-lays it out with a release's patches) with the committed ones.
func checkReleases(t *testing.T, family string, open func([]patch) (*relayout, error), regen string) {
	t.Helper()
	base := layouts.Committed(family)
	if base == nil {
		t.Fatalf("no committed %s table", family)
	}
	groups, err := releaseLayouts(family, base, open)
	if err != nil {
		t.Fatal(err)
	}
	var rels []string
	for _, g := range groups {
		rels = append(rels, g.releases...)
		for _, r := range g.releases {
			got, want := g.fields, layouts.ReleaseFields(r)
			if len(got) == 0 && len(want) == 0 {
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Ruby %s: the facts move %v, the committed layout %v", r, got, want)
			}
		}
	}
	if committed := layouts.Releases(family); !reflect.DeepEqual(rels, committed) {
		t.Errorf("Ruby %s: the facts list releases %v, the committed layouts %v", family, rels, committed)
	}
	if t.Failed() {
		t.Errorf("regenerate with: %s", regen)
	}
}

// TestReleaseTables makes every known release's layout again from the
// DWARF its family's table comes from (a cached debug build, or the wasm
// module) and the release facts, and compares with the committed release
// layouts: stale release layouts fail here. The re-layout first proves
// itself: without a release's patches it must give the table itself.
func TestReleaseTables(t *testing.T) {
	for _, fam := range []string{"2.7", "3.1", "3.3", "3.4"} {
		t.Run(fam, func(t *testing.T) {
			ruby := "/var/cache/rbscope/rubies/ruby-" + fam + "-shared/bin/ruby"
			out, err := exec.Command(ruby, "-e", `print RUBY_VERSION, "\n", File.join(RbConfig::CONFIG["libdir"], RbConfig::CONFIG["LIBRUBY_SO"])`).Output()
			if err != nil {
				t.Skipf("no %s debug build: %v", fam, err)
			}
			version, image, _ := strings.Cut(string(out), "\n")
			if version != layouts.Committed(fam).Checked {
				t.Skipf("the %s build is %s; the table was made from %s", fam, version, layouts.Committed(fam).Checked)
			}
			ef, err := elf.Open(image)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			d, err := ef.DWARF()
			if err != nil {
				t.Fatalf("%s: %v", image, err)
			}
			checkReleases(t, fam, func(ps []patch) (*relayout, error) { return newRelayout(d, lp64DWARF, ps) },
				"go run ./tools/layoutgen -ruby "+ruby)
		})
	}
	for _, c := range []struct{ family, version string }{{"3.2", "3.2.4"}, {"4.0", "4.0.0"}} {
		t.Run(c.family, func(t *testing.T) {
			file := wasmModule(t, c.family)
			checkReleases(t, c.family, func(ps []patch) (*relayout, error) {
				d, err := wasmDWARF(file)
				if err != nil {
					return nil, err
				}
				return newRelayout(d, wasm32, append(append([]patch(nil), familyPatches[c.family]...), ps...))
			}, "go run ./tools/layoutgen -wasm "+filepath.Clean(file)+" -version "+c.version+" -package ...")
		})
	}
}
