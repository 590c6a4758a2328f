package unwind

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestSeparateDebugFrame unwinds a program built without unwind tables
// whose call frame information is in its separate debug file's
// .debug_frame only (as musl's C library's is, in Alpine's musl-dbg): the
// walk goes from inner through outer to main.
func TestSeparateDebugFrame(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "root (to stop another process)")
	}
	for _, tool := range []string{"gcc", "objcopy", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			testruby.Missing(t, "%s (make deps installs gcc and binutils)", tool)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nounwind")
	for _, args := range [][]string{
		{"gcc", "-g", "-O1", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-fomit-frame-pointer", "-Wl,--build-id", "-o", bin, testruby.Testdata("native/nounwind.c")},
		{"objcopy", "--only-keep-debug", bin, bin + ".debug"},
		{"strip", "--strip-debug", bin},
		{"objcopy", "--add-gnu-debuglink=" + bin + ".debug", bin},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", args[0], err, out)
		}
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	if ef.Section(".debug_frame") != nil {
		t.Fatal("setup: the stripped program still has .debug_frame")
	}
	ef.Close()

	pid, _ := testruby.StartReporting(t, bin)
	l, err := target.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	maps, err := l.Mappings()
	if err != nil {
		t.Fatal(err)
	}
	u := New(l, maps)
	defer u.Close()
	var frames []Frame
	var werr error
	// pause's return address is in inner once the thread waits there; on
	// a busy machine it may be on its way: read until it is.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := l.WhilePaused([]int{pid}, func(s *target.Stopped) error {
			regs, err := s.Registers(pid)
			if err != nil {
				return err
			}
			frames, werr = u.Unwind(FromTarget(regs))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		u.Symbolize(frames)
		var names []string
		for _, f := range frames {
			names = append(names, f.Function)
		}
		i := slices.Index(names, "inner")
		if i >= 0 && i+2 < len(names) && names[i+1] == "outer" && names[i+2] == "main" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("frames %q (stopped by %v), want inner, outer, main", names, werr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
