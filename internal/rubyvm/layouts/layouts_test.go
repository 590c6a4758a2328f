package layouts_test

import (
	"debug/elf"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
	"github.com/rbscope/rbscope/internal/testruby"
)

// configureDependent are the fields that differ between builds of one
// release as configure decides, and why; a table serves them all.
var configureDependent = map[string]string{
	"IseqBodySize": "the JIT fields that end the body exist as configure decides (YJIT needs rustc); a dump reads the body up to BodyJITEntry, which agrees",
}

// TestTablesMatchDebugBuilds re-reads the DWARF of every debug Ruby build in
// the cache and checks that the committed table for its family says the
// same: a stale or hand-edited table fails here.
func TestTablesMatchDebugBuilds(t *testing.T) {
	checked := 0
	for _, rb := range testruby.Rubies(t) {
		if rb.Stripped {
			continue
		}
		out, err := exec.Command(rb.Bin, "-e", `print RUBY_VERSION, "\n", (RbConfig::CONFIG["ENABLE_SHARED"] == "yes" ? File.join(RbConfig::CONFIG["libdir"], RbConfig::CONFIG["LIBRUBY_SO"]) : RbConfig.ruby)`).Output()
		if err != nil {
			t.Fatalf("%s: %v", rb.Bin, err)
		}
		version, image, _ := strings.Cut(string(out), "\n")
		family := strings.Join(strings.SplitN(version, ".", 3)[:2], ".")
		ef, err := elf.Open(image)
		if err != nil {
			t.Fatal(err)
		}
		d, err := ef.DWARF()
		if err != nil {
			ef.Close()
			continue // not a debug build
		}
		got, err := layout.FromDWARF(d, family, "table")
		ef.Close()
		if err != nil {
			t.Fatalf("%s: %v", image, err)
		}
		want := layouts.Committed(family)
		if want == nil {
			t.Errorf("no built-in table for Ruby %s: run go run ./tools/layoutgen -ruby %s", family, rb.Bin)
			continue
		}
		got.Checked = version
		if version != want.Checked {
			// another release of the family (3.4.11 beside 3.4.5): what
			// rbscope reads a stripped copy of it with, its release's
			// layout (or the newest known release's), must be its DWARF
			rel, known, note := layouts.ForRelease(version)
			if rel == nil {
				t.Errorf("%s: no layout for Ruby %s", rb.Name, version)
				continue
			}
			t.Logf("%s: Ruby %s, read without DWARF through %s's table with the release's moves (known %v) %s", rb.Name, version, family, known, note)
			want, got.Checked, rel.Release = rel, rel.Checked, ""
		}
		gv, wv := reflect.ValueOf(*got), reflect.ValueOf(*want)
		stale := false
		for i := 0; i < gv.NumField(); i++ {
			name := gv.Type().Field(i).Name
			if reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
				continue
			}
			if why, ok := configureDependent[name]; ok && got.BodyJITEntry == want.BodyJITEntry {
				t.Logf("%s (%s): %s is %v in DWARF, %v in the table: %s", rb.Name, family, name, gv.Field(i), wv.Field(i), why)
				continue
			}
			stale = true
			t.Errorf("%s (%s): %s is %v in DWARF, %v in the table", filepath.Base(image), family, name, gv.Field(i), wv.Field(i))
		}
		if stale {
			t.Errorf("regenerate with: go run ./tools/layoutgen -ruby %s", rb.Bin)
		}
		checked++
	}
	if checked == 0 {
		testruby.Missing(t, "no debug Ruby build in the cache (scripts/build-ruby.sh 3.1 makes one)")
	}
}

func TestForUnknownFamily(t *testing.T) {
	if l := layouts.For("3.0"); l != nil {
		t.Fatalf("For(3.0) = %+v, want nil", l)
	}
	if l := layouts.For("3.1"); l == nil || l.Family != "3.1" || l.CFPSize <= 0 {
		t.Fatalf("For(3.1) = %+v", l)
	}
}

// TestTrapListOffsets: the trap list (VMTrapCmd) of each release is where
// rbspy's bindgen bindings of its headers (ruby-structs/src/ruby_X_Y_Z.rs),
// compiled with rustc for x86_64, put rb_vm_struct.trap_list
// (std::mem::offset_of!), for the releases where it moved and those the
// tables were made from.
func TestTrapListOffsets(t *testing.T) {
	for _, c := range []struct {
		release string
		want    int64
	}{
		{"2.7.4", 472}, {"3.1.2", 456}, {"3.1.7", 464},
		{"3.2.0", 480}, {"3.2.3", 488}, {"3.2.4", 496}, {"3.2.7", 496}, {"3.2.11", 496},
		{"3.3.8", 656}, {"3.4.5", 664},
		{"4.0.0", 592}, {"4.0.5", 592}, {"4.0.6", 600},
	} {
		l, known, _ := layouts.ForRelease(c.release)
		if l == nil || !known {
			t.Errorf("%s: no layout of its own", c.release)
			continue
		}
		if l.VMTrapCmd != c.want {
			t.Errorf("%s: VMTrapCmd = %d, the bindings' trap_list is at %d", c.release, l.VMTrapCmd, c.want)
		}
	}
}

// TestReleases: every release a family lists has a layout whose moved
// fields are fields of Layout, the release its table was made from has the
// table's own, and a release newer than the newest known is read with the
// newest's layout and a note, an older unknown one with the table's.
func TestReleases(t *testing.T) {
	fields := map[string]bool{}
	lt := reflect.TypeOf(layout.Layout{})
	for i := range lt.NumField() {
		if lt.Field(i).Type.Kind() == reflect.Int64 {
			fields[lt.Field(i).Name] = true
		}
	}
	for _, fam := range layouts.Families() {
		rels := layouts.Releases(fam)
		if len(rels) == 0 {
			continue
		}
		table := layouts.For(fam)
		for _, r := range rels {
			for name := range layouts.ReleaseFields(r) {
				if !fields[name] {
					t.Errorf("Ruby %s moves %s, which is no int64 field of layout.Layout", r, name)
				}
			}
			l, known, note := layouts.ForRelease(r)
			if l == nil || !known || note != "" || l.Release != r || l.Family != fam {
				t.Errorf("ForRelease(%s) = %v, %v, %q", r, l != nil, known, note)
			}
		}
		if f := layouts.ReleaseFields(table.Checked); len(f) != 0 {
			t.Errorf("Ruby %s, which the %s table was made from, moves %v", table.Checked, fam, f)
		}
		newest := rels[len(rels)-1]
		parts := strings.Split(newest, ".")
		n, _ := strconv.Atoi(parts[2])
		next := fmt.Sprintf("%s.%d", fam, n+1)
		l, known, note := layouts.ForRelease(next)
		want, _, _ := layouts.ForRelease(newest)
		want.Release = next
		if known || !strings.Contains(note, "newer than the releases rbscope knows") || !reflect.DeepEqual(l, want) {
			t.Errorf("ForRelease(%s): known %v, note %q, same as %s's layout: %v", next, known, note, newest, reflect.DeepEqual(l, want))
		}
	}
	if l, _, _ := layouts.ForRelease("3.0.7"); l != nil {
		t.Errorf("ForRelease(3.0.7) gave a layout; no 3.0 table exists")
	}
}

// TestTablesWriteEveryField: every generated table names every offset
// field of layout.Layout: a field added to Layout without the tables made
// again would read as offset 0 from a stale table.
func TestTablesWriteEveryField(t *testing.T) {
	var want []string
	lt := reflect.TypeOf(layout.Layout{})
	for i := 0; i < lt.NumField(); i++ {
		f := lt.Field(i)
		if _, ok := f.Tag.Lookup("dwarf"); ok {
			want = append(want, f.Name)
		} else if _, ok := f.Tag.Lookup("macro"); ok {
			want = append(want, f.Name)
		}
	}
	files, _ := filepath.Glob("ruby_*.go")
	if len(files) == 0 {
		t.Fatal("no generated tables (ruby_*.go) here")
	}
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if kv, ok := n.(*ast.KeyValueExpr); ok {
				if id, ok := kv.Key.(*ast.Ident); ok {
					have[id.Name] = true
				}
			}
			return true
		})
		for _, name := range want {
			if !have[name] {
				t.Errorf("%s does not set %s: make the table again with tools/layoutgen (CONTRIBUTING.md)", file, name)
			}
		}
	}
}
