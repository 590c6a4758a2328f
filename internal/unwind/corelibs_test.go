package unwind

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestCoreWithoutItsLibraries unwinds the main thread of a core whose
// program and shared library are deleted once it is taken, and of the same
// core read with no file of this machine (--core-only), and compares with
// the walk made while the files were there. The core holds the files'
// pages (coredump_filter keeps file-backed mappings), so the walk finds
// .eh_frame through PT_GNU_EH_FRAME in the core's memory and names frames
// from the dynamic symbol table there: the frames are the same, and each
// frame named from memory is named after the same function.
func TestCoreWithoutItsLibraries(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "root (to read another process)")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		testruby.Missing(t, "gcc (make deps installs it)")
	}
	dir := filepath.Join(t.TempDir(), "priv")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lib, bin := filepath.Join(dir, "libpriv.so"), filepath.Join(dir, "privmain")
	for _, args := range [][]string{
		{"gcc", "-O1", "-shared", "-fPIC", "-Wl,--build-id", "-o", lib, testruby.Testdata("native/privlib.c")},
		{"gcc", "-O1", "-Wl,--build-id", "-o", bin, testruby.Testdata("native/privmain.c"), "-L" + dir, "-lpriv", "-Wl,-rpath," + dir},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", args[0], err, out)
		}
	}
	pid, _ := testruby.StartReporting(t, bin)
	// Keep file-backed private mappings in the core (bit 2), beside the
	// default anonymous memory and ELF headers: gcore follows the filter.
	if err := os.WriteFile(filepath.Join("/proc", strconv.Itoa(pid), "coredump_filter"), []byte("0x37"), 0o644); err != nil {
		t.Fatalf("setup: %v", err)
	}

	// The thread prints "ready" before it calls pause: take cores until
	// one has it in pause.
	var core string
	var present []Frame
	for deadline := time.Now().Add(30 * time.Second); ; {
		core = testruby.Gcore(t, pid)
		present = coreFrames(t, core, target.CoreOptions{}, pid)
		if i := slices.IndexFunc(present, func(f Frame) bool { return f.Function == "priv_inner" }); i > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup: the core's frames %v do not pass through priv_inner", names(present))
		}
		time.Sleep(50 * time.Millisecond)
	}
	want := names(present)
	if i := slices.Index(want, "priv_inner"); i+2 >= len(want) || want[i+1] != "priv_outer" || want[i+2] != "main" {
		t.Fatalf("setup: with the files, frames %q", want)
	}

	// With the default filter the core holds the first mapping of each
	// file (gcore keeps it whole: the dynamic symbols) but not .eh_frame:
	// the innermost frame is named from memory, and the walk ends there.
	if err := os.WriteFile(filepath.Join("/proc", strconv.Itoa(pid), "coredump_filter"), []byte("0x33"), 0o644); err != nil {
		t.Fatalf("setup: %v", err)
	}
	if got := coreFrames(t, testruby.Gcore(t, pid), target.CoreOptions{CoreOnly: true}, pid); len(got) == 0 || got[0].FuncStart != present[0].FuncStart || got[0].Function == "" {
		t.Errorf("default filter, no file of this machine: frames %q, want the first named after %s", names(got), present[0].Function)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts target.CoreOptions
	}{
		{"deleted", target.CoreOptions{}},
		{"core-only", target.CoreOptions{CoreOnly: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := coreFrames(t, core, c.opts, pid)
			t.Logf("with the files: %q", want)
			t.Logf("from the core:  %q", names(got))
			if len(got) != len(present) {
				t.Fatalf("%d frames, %d with the files", len(got), len(present))
			}
			for i, f := range got {
				p := present[i]
				if f.PC != p.PC || f.Object != p.Object || f.CFA != p.CFA {
					t.Errorf("frame %d: pc %#x in %s, cfa %#x; with the files pc %#x in %s, cfa %#x", i, f.PC, f.Object, f.CFA, p.PC, p.Object, p.CFA)
				}
				// A name from memory is the same function's: its start is
				// the one the files' symbols give (an alias may be named).
				if f.Function != "" && (f.FuncStart != p.FuncStart || p.Function == "") {
					t.Errorf("frame %d named %s at %#x; with the files %s at %#x", i, f.Function, f.FuncStart, p.Function, p.FuncStart)
				}
			}
			// The exported function of the deleted library is named from
			// the core; its static one is not in the dynamic symbols.
			if i := slices.Index(want, "priv_outer"); i >= len(got) || got[i].Function != "priv_outer" {
				t.Errorf("priv_outer is not named from the core")
			}
			if c.opts.CoreOnly && (got[0].Function == "" || got[0].Object != present[0].Object) {
				t.Errorf("the C library's frame %q is not named from the core", got[0].Name())
			}
		})
	}
}

// coreFrames unwinds and names the frames of thread tid of the core.
func coreFrames(t *testing.T, path string, opts target.CoreOptions, tid int) []Frame {
	t.Helper()
	c, err := target.OpenCore(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	regs, err := c.Registers(tid)
	if err != nil {
		t.Fatalf("thread %d: %v", tid, err)
	}
	maps, err := c.Mappings()
	if err != nil {
		t.Fatal(err)
	}
	u := New(c, maps)
	defer u.Close()
	frames, err := u.Unwind(FromTarget(regs))
	t.Logf("walk ends: %v", err)
	u.Symbolize(frames)
	return frames
}

func names(frames []Frame) []string {
	var out []string
	for _, f := range frames {
		out = append(out, f.Function)
	}
	return out
}
