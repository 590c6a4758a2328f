package malloc_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/malloc"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// jemallocLib is Debian's libjemalloc2.
const jemallocLib = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"

type block struct{ addr, asked, usable uint64 }

// startBlocks compiles testdata/malloc/blocks.c with cc, runs it with env
// and returns its pid and the blocks it reports.
func startBlocks(t *testing.T, cc string, env ...string) (int, []block) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "blocks")
	if out, err := exec.Command(cc, "-O1", "-o", bin, testruby.Testdata("malloc/blocks.c")).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	pid, lines := testruby.StartReporting(t, bin, env...)
	var blocks []block
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("bad line %q", l)
		}
		a, err1 := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
		s, err2 := strconv.ParseUint(f[1], 10, 64)
		u, err3 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("bad line %q", l)
		}
		blocks = append(blocks, block{a, s, u})
	}
	return pid, blocks
}

// TestUsableSizeAgreesWithTheAllocator sizes every block a C program
// allocated, from outside, and compares with what the allocator's own
// malloc_usable_size told the program, under glibc's malloc, jemalloc
// preloaded and musl's mallocng.
func TestUsableSizeAgreesWithTheAllocator(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "root (to read another process's memory)")
	}
	cases := []struct {
		name string
		cc   string
		env  []string
		kind malloc.Kind
		lib  string
	}{
		{"glibc", "gcc", nil, malloc.Glibc, ""},
		{"jemalloc", "gcc", []string{"LD_PRELOAD=" + jemallocLib}, malloc.Jemalloc, jemallocLib},
		{"musl", "musl-gcc", nil, malloc.Mallocng, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.cc); err != nil {
				testruby.Missing(t, "%s (make deps installs it)", c.cc)
			}
			if c.lib != "" {
				if _, err := os.Stat(c.lib); err != nil {
					testruby.Missing(t, "%s (make deps installs libjemalloc2)", c.lib)
				}
			}
			pid, blocks := startBlocks(t, c.cc, c.env...)
			l, err := target.Attach(pid)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			maps, err := l.Mappings()
			if err != nil {
				t.Fatal(err)
			}
			if got := malloc.Name(maps); got != c.kind {
				t.Fatalf("Name = %s, want %s", got, c.kind)
			}
			// Two blocks of the first round are the probes; every other
			// block is checked.
			probes := []malloc.Probe{{Addr: blocks[6].addr, Size: blocks[6].asked}, {Addr: blocks[9].addr, Size: blocks[9].asked}}
			id := malloc.Identify(l, maps, probes)
			if id.Why != "" || id.Kind() != c.kind {
				t.Fatalf("Identify: %s (%s)", id.Kind(), id.Why)
			}
			for _, b := range blocks {
				n, ok := id.UsableSize(b.addr)
				if !ok || n != b.usable {
					t.Errorf("block at %#x of %d bytes: sized %d (ok=%v), malloc_usable_size said %d", b.addr, b.asked, n, ok, b.usable)
				}
			}
			// mallocng's metadata vouches for block starts only: an
			// address 16 bytes into a block is not one.
			if c.kind == malloc.Mallocng {
				for _, b := range blocks {
					if b.asked < 32 {
						continue
					}
					if n, ok := id.UsableSize(b.addr + 16); ok {
						t.Errorf("the address 16 bytes into the block at %#x was sized %d", b.addr, n)
					}
				}
			}
			// A wrong probe makes the allocator size nothing.
			bad := malloc.Identify(l, maps, []malloc.Probe{{Addr: blocks[6].addr, Size: 1 << 30}})
			if bad.Why == "" || bad.Kind() != malloc.Unknown {
				t.Errorf("a probe the metadata disagrees with was accepted: %s", bad.Kind())
			}
		})
	}
}
