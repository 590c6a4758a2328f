package binary_test

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	rbinary "github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestSymbolsOfLiveRuby finds the Ruby image in a live process, applies its
// load bias and reads two exported constants, which must agree with what
// the Ruby program prints about itself.
func TestSymbolsOfLiveRuby(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			cmd := exec.Command(rb.Bin, "-e", `puts RUBY_VERSION; puts RbConfig::CONFIG["ruby_version"]; STDOUT.flush; sleep`)
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			sc := bufio.NewScanner(out)
			sc.Scan()
			version := sc.Text()
			sc.Scan()
			apiVersion := sc.Text() // "3.1.0"

			tg, err := target.Attach(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			maps, err := tg.Mappings()
			if err != nil {
				t.Fatal(err)
			}
			path, err := rubyvm.FindImage(tg, maps)
			if err != nil {
				t.Fatal(err)
			}
			im, err := rbinary.Open(tg, maps, path)
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()

			addr, _, err := im.Symbol("ruby_version")
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, len(version)+1)
			if err := target.ReadFull(tg, b, addr); err != nil {
				t.Fatal(err)
			}
			if string(b) != version+"\x00" {
				t.Errorf("ruby_version at %#x reads %q, Ruby says %q", addr, b, version)
			}
			// ruby_api_version is const int[3], e.g. {3, 1, 0}.
			addr, size, err := im.Symbol("ruby_api_version")
			if err != nil {
				t.Fatal(err)
			}
			if size != 12 {
				t.Errorf("ruby_api_version size %d, want 12", size)
			}
			b = make([]byte, 12)
			if err := target.ReadFull(tg, b, addr); err != nil {
				t.Fatal(err)
			}
			var parts []string
			for i := 0; i < 3; i++ {
				parts = append(parts, strconv.Itoa(int(binary.LittleEndian.Uint32(b[i*4:]))))
			}
			if got := strings.Join(parts, "."); got != apiVersion {
				t.Errorf("ruby_api_version reads %s, RbConfig says %s", got, apiVersion)
			}
			if _, _, err := im.Symbol("no_such_symbol_in_ruby"); err == nil {
				t.Error("a missing symbol was found")
			}
		})
	}
}

// TestLoadBiasOfLiveExecutables builds a small program that holds a known
// string, as a non-PIE and as a PIE executable (the two ways a static Ruby
// may be linked), runs it and reads the string through its symbol.
func TestLoadBiasOfLiveExecutables(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		testruby.Missing(t, "gcc not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "hold.c")
	const text = "rbscope-load-bias-check"
	prog := `#include <unistd.h>
#include <stdio.h>
const char ruby_version[] = "` + text + `";
int main(void) { printf("%p\n", (void *)ruby_version); fflush(stdout); pause(); return 0; }
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		flags []string
		typ   elf.Type
	}{
		{"non-PIE", []string{"-no-pie", "-fno-pie"}, elf.ET_EXEC},
		{"PIE", []string{"-pie", "-fpie"}, elf.ET_DYN},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := filepath.Join(dir, "hold-"+c.name)
			if out, err := exec.Command("gcc", append(c.flags, "-o", bin, src)...).CombinedOutput(); err != nil {
				t.Fatalf("gcc: %v\n%s", err, out)
			}
			want, tg, im := runAndOpen(t, bin)
			if im.File.Type != c.typ {
				t.Fatalf("gcc made a %v, want %v", im.File.Type, c.typ)
			}
			if c.typ == elf.ET_EXEC && im.Bias != 0 {
				t.Errorf("non-PIE executable got load bias %#x, want 0", im.Bias)
			}
			addr, _, err := im.Symbol("ruby_version")
			if err != nil {
				t.Fatal(err)
			}
			if addr != want {
				t.Errorf("ruby_version at %#x, the program says %#x", addr, want)
			}
			b := make([]byte, len(text))
			if err := target.ReadFull(tg, b, addr); err != nil {
				t.Fatal(err)
			}
			if string(b) != text {
				t.Errorf("read %q at %#x, want %q", b, addr, text)
			}
		})
	}
}

// TestMiniDebugInfo: a stripped executable that carries its symbol table
// xz-compressed in .gnu_debugdata (MiniDebugInfo, as Fedora builds) gets
// its static functions named; the same file without the section does not.
func TestMiniDebugInfo(t *testing.T) {
	for _, tool := range []string{"gcc", "objcopy", "strip", "xz"} {
		if _, err := exec.LookPath(tool); err != nil {
			testruby.Missing(t, "%s not installed", tool)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "hidden.c")
	prog := `#include <unistd.h>
#include <stdio.h>
__attribute__((noinline)) static void hidden_work(void) { printf("%p\n", (void *)hidden_work); fflush(stdout); pause(); }
int main(void) { hidden_work(); return 0; }
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("setup: %v: %v\n%s", args, err, out)
		}
	}
	full, mini, plain, withMini := filepath.Join(dir, "full"), filepath.Join(dir, "mini"), filepath.Join(dir, "plain"), filepath.Join(dir, "withmini")
	run("gcc", "-O2", "-o", full, src)
	run("objcopy", "--only-keep-debug", full, mini)
	run("xz", "-k", mini)
	run("objcopy", "--strip-all", full, plain)
	run("objcopy", "--strip-all", "--add-section", ".gnu_debugdata="+mini+".xz", full, withMini)
	name := func(bin string) string {
		addr, _, im := runAndOpen(t, bin)
		fn, _, _, _ := im.FunctionAt(addr + 1)
		return fn
	}
	if got := name(withMini); got != "hidden_work" {
		t.Errorf("with .gnu_debugdata: %q, want hidden_work", got)
	}
	// Symbol reads the same debug source as FunctionAt.
	addr, _, im := runAndOpen(t, withMini)
	if got, _, err := im.Symbol("hidden_work"); err != nil || got != addr {
		t.Errorf("with .gnu_debugdata: Symbol(hidden_work) = %#x, %v; the program says %#x", got, err, addr)
	}
	if src := im.DebugSource(); src.DebugFile != rbinary.MiniDebugInfo {
		t.Errorf("debug source %+v, want %s", src, rbinary.MiniDebugInfo)
	}
	if got := name(plain); got == "hidden_work" {
		t.Error("setup: the stripped file without .gnu_debugdata names the static function")
	}
	// A stream that asks for a 1.5 GB dictionary is refused before its
	// decoder allocates one.
	greedy, withGreedy := filepath.Join(dir, "greedy.xz"), filepath.Join(dir, "withgreedy")
	out, err := exec.Command("xz", "-c", "--lzma2=dict=1536MiB", mini).Output()
	if err != nil {
		t.Fatalf("setup: xz: %v", err)
	}
	if err := os.WriteFile(greedy, out, 0o644); err != nil {
		t.Fatal(err)
	}
	run("objcopy", "--strip-all", "--add-section", ".gnu_debugdata="+greedy, full, withGreedy)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := name(withGreedy)
	runtime.ReadMemStats(&after)
	if got == "hidden_work" {
		t.Error("a .gnu_debugdata asking for a 1.5 GB dictionary was decoded")
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<20 {
		t.Errorf("reading it allocated %d MB", grew>>20)
	}
}

// runAndOpen runs bin, a program that prints an address of its own and
// waits, attaches to it and opens bin's image in it; all three end with
// the test.
func runAndOpen(t *testing.T, bin string) (uint64, *target.Live, *rbinary.Image) {
	t.Helper()
	cmd := exec.Command(bin)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	sc.Scan()
	addr, err := strconv.ParseUint(strings.TrimPrefix(sc.Text(), "0x"), 16, 64)
	if err != nil {
		t.Fatalf("setup: the program printed %q", sc.Text())
	}
	tg, err := target.Attach(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	maps, err := tg.Mappings()
	if err != nil {
		t.Fatal(err)
	}
	im, err := rbinary.Open(tg, maps, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { im.Close() })
	return addr, tg, im
}
