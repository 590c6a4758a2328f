package rubyvm

import (
	"debug/elf"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
)

// TestChooseLayoutWithoutDWARF: an image without debug info is read with
// the built-in table of its family, and a family without one is refused
// with an error naming the version and the families rbscope has.
func TestChooseLayoutWithoutDWARF(t *testing.T) {
	im := &binary.Image{Path: "/opt/ruby/lib/libruby.so.3.0.7", File: &elf.File{FileHeader: elf.FileHeader{Machine: elf.EM_X86_64}}}
	for _, fam := range layouts.Families() {
		l, _, err := chooseLayout(im, fam, fam+".0")
		if err != nil {
			t.Fatalf("family %s: %v", fam, err)
		}
		if l.Family != fam || l.Source != "table" || l.Release != fam+".0" {
			t.Errorf("family %s: got layout %s (release %q) from %s", fam, l.Family, l.Release, l.Source)
		}
		// each known release gets its own fields, the others the table's
		for _, rel := range layouts.Releases(fam) {
			l, _, err := chooseLayout(im, fam, rel)
			if err != nil {
				t.Fatalf("Ruby %s: %v", rel, err)
			}
			moved := layouts.ReleaseFields(rel)
			lv, tv := reflect.ValueOf(l).Elem(), reflect.ValueOf(layouts.For(fam)).Elem()
			for i := range lv.NumField() {
				name := lv.Type().Field(i).Name
				if lv.Field(i).Kind() != reflect.Int64 {
					continue
				}
				want, ok := moved[name]
				if !ok || tv.Field(i).Int() < 0 {
					want = tv.Field(i).Int()
				}
				if got := lv.Field(i).Int(); got != want {
					t.Errorf("Ruby %s: %s = %d, want %d", rel, name, got, want)
				}
			}
		}
	}
	_, _, err := chooseLayout(im, "3.0", "3.0.7")
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Ruby 3.0 without DWARF: %v, want ErrUnsupported", err)
	}
	for _, want := range []string{"Ruby 3.0.7", im.Path, "no debug info", "no built-in table for Ruby 3.0", "built-in tables: " + strings.Join(layouts.Families(), ", ")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if !strings.HasSuffix(err.Error(), "(see "+DocRubies+")") {
		t.Errorf("error %q does not end with the page on supported Rubies, %s", err, DocRubies)
	}
	// An aarch64 image gets aarch64's tables, and only those.
	arm := &binary.Image{Path: "/usr/lib/aarch64-linux-gnu/libruby-3.1.so.3.1.2", File: &elf.File{FileHeader: elf.FileHeader{Machine: elf.EM_AARCH64}}}
	if l, _, err := chooseLayout(arm, "3.1", "3.1.2"); err != nil || l != nil && (l.Source != "table" || l.VMObjspace == layouts.For("3.1").VMObjspace) {
		t.Errorf("aarch64 3.1: %v, %+v; want the aarch64 table", err, l)
	}
	if _, _, err := chooseLayout(arm, "3.3", "3.3.8"); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "(for aarch64)") {
		t.Errorf("aarch64 3.3 without DWARF: %v, want ErrUnsupported naming aarch64's tables", err)
	}
	riscv := &binary.Image{Path: "/usr/lib/libruby.so", File: &elf.File{FileHeader: elf.FileHeader{Machine: elf.EM_RISCV}}}
	if _, _, err := chooseLayout(riscv, "3.1", "3.1.2"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a RISC-V image: %v, want ErrUnsupported", err)
	}
	v := &VM{VersionFrom: "the mapped file /opt/ruby/lib/libruby.so.3.0.7"}
	if err := v.withVersionSource(err); !strings.HasSuffix(err.Error(), "(see "+DocRubies+")") || !strings.Contains(err.Error(), "version taken from") || !errors.Is(err, ErrUnsupported) {
		t.Errorf("with the version's source: %q, want it before the page, and ErrUnsupported", err)
	}
}
