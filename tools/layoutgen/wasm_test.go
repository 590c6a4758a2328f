package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm/layouts"

	"github.com/rbscope/rbscope/internal/testruby"
)

// wasmModule finds the ruby.debug+stdlib.wasm of the @ruby/FAMILY-wasm-wasi
// npm package unpacked (npm pack, tar -xzf) into $RBSCOPE_WASM_DIR/FAMILY
// or /var/cache/rbscope/wasm/FAMILY; the test skips without it.
func wasmModule(t *testing.T, family string) string {
	t.Helper()
	dir := os.Getenv("RBSCOPE_WASM_DIR")
	if dir == "" {
		dir = "/var/cache/rbscope/wasm"
	}
	f := filepath.Join(dir, family, "package", "dist", "ruby.debug+stdlib.wasm")
	if _, err := os.Stat(f); err != nil {
		testruby.Missing(t, "no %s (scripts/fetch-wasm.sh, or npm pack @ruby/%s-wasm-wasi and unpack it into %s)", f, family, filepath.Join(dir, family))
	}
	return f
}

// TestWasmTables regenerates the tables made from wasm modules and compares
// them with the committed ones.
func TestWasmTables(t *testing.T) {
	for _, c := range []struct{ family, version string }{{"3.2", "3.2.4"}, {"4.0", "4.0.0"}} {
		t.Run(c.family, func(t *testing.T) {
			got, unused, err := wasmLayout(wasmModule(t, c.family), c.version, false, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range unused {
				t.Logf("patch not used by the table: %s", p)
			}
			want := layouts.Committed(c.family)
			if want == nil {
				t.Fatalf("no committed table for %s", c.family)
			}
			if !reflect.DeepEqual(got, want) {
				diffs, _ := compareLayouts(got, want)
				for _, d := range diffs {
					t.Error(d)
				}
				t.Errorf("regenerate with go run ./tools/layoutgen -wasm %s -version %s -package ...", wasmModule(t, c.family), c.version)
			}
		})
	}
}

// TestCrossCheck proves the re-layout and the 3.3/3.4 patch lists: from
// the wasm modules of 3.3 and 3.4 it must make the layout our x86_64 debug
// builds' DWARF gives (3.3: or the committed table, made from one).
func TestCrossCheck(t *testing.T) {
	for _, c := range []struct{ family, version string }{{"3.3", "3.3.3"}, {"3.4", "3.4.1"}} {
		t.Run(c.family, func(t *testing.T) {
			got, _, err := wasmLayout(wasmModule(t, c.family), c.version, false, false)
			if err != nil {
				t.Fatal(err)
			}
			libs, _ := filepath.Glob("/var/cache/rbscope/rubies/ruby-" + c.family + "-shared/lib/libruby.so." + c.family + ".*")
			want := layouts.Committed(c.family)
			from := "the committed table"
			if len(libs) > 0 {
				if want, err = elfLayout(libs[0], c.family); err != nil {
					t.Fatal(err)
				}
				from = libs[0]
			}
			if want == nil {
				t.Skipf("no x86_64 debug build of %s nor table", c.family)
			}
			diffs, _ := compareLayouts(got, want)
			for _, d := range diffs {
				t.Errorf("against %s: %s", from, d)
			}
		})
	}
}

func TestParseFields(t *testing.T) {
	fs, err := parseFields("a ptr; b {x int; y u8:3}; c union{p ptr; q u64}[2]; d u32:1")
	if err != nil {
		t.Fatal(err)
	}
	want := []field{{"a", "ptr", 0}, {"b", "{x int; y u8:3}", 0}, {"c", "union{p ptr; q u64}[2]", 0}, {"d", "u32", 1}}
	if !reflect.DeepEqual(fs, want) {
		t.Fatalf("parseFields = %+v, want %+v", fs, want)
	}
}
