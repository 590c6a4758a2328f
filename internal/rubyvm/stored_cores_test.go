package rubyvm_test

// The no-Ruby test tier: cores stored on disk, read with nothing but the
// core (target.CoreOptions.CoreOnly: no file of this machine is opened),
// as a core from another machine is. It needs no Ruby and no root:
//
//   - peer cores: gcore dumps of sleeping Ruby processes made on machines
//     we never saw ($RBSCOPE_PEER_CORES, default /work/shared/peer-cores:
//     *.gz and expected.json), decompressed once into the cache;
//   - our own workloads' cores, stored by scripts/gcore-workloads.sh under
//     $RBSCOPE_CORES (default /var/cache/rbscope/cores) as NAME.core.zst
//     (or .gz) beside NAME.json, the program's own report.
//
// Either set is skipped when absent.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/rubyvm/heapdump"
	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// openCoreOnly opens a core reading nothing of this machine's files and
// finds its VM, with nothing but the core: no --force-version. A core that
// holds nothing of the Ruby's release as a string (no ruby_version, no
// ruby_description: the image's read-only data left out) has its release
// proven from its heap, or is refused. The VM error is returned, not
// fatal.
func openCoreOnly(t *testing.T, path string) (*target.Core, *rubyvm.VM, error) {
	t.Helper()
	c, err := target.OpenCore(path, target.CoreOptions{CoreOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	vm, err := rubyvm.Open(c)
	if err != nil {
		return c, nil, err
	}
	t.Cleanup(func() { vm.Close() })
	t.Logf("Ruby %s, layout %s; %s", vm.Version, vm.Layout.Source, vm.Fallbacks())
	return c, vm, nil
}

// familyOf returns "MAJOR.MINOR" of a version.
func familyOf(version string) string {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return version
	}
	return parts[0] + "." + parts[1]
}

// expectUnsupported checks the error of a core whose Ruby family has no
// built-in table: one line, naming the family.
func expectUnsupported(t *testing.T, err error, family string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Ruby %s has no built-in table, yet the core opened", family)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "Ruby "+family) || !errors.Is(err, rubyvm.ErrUnsupported) {
		t.Errorf("error for Ruby %s is not one line naming it (or not ErrUnsupported): %q", family, msg)
	}
}

// peerExpected is expected.json beside the peer cores.
type peerExpected struct {
	Cores map[string]struct {
		Ruby   string  `json:"ruby"`
		VMAddr *string `json:"vm_addr"`
		Frames [][]any `json:"frames"` // [label, path or null, line or null]
	} `json:"cores"`
}

// baseLabel drops the owner Ruby 3.4 puts before a method's name
// ("block in Object#looper" -> "block in looper", "B::Ab#bbb" -> "bbb").
func baseLabel(label string) string {
	i := strings.LastIndexAny(label, "#.")
	if i < 0 {
		return label
	}
	start := strings.LastIndexByte(label[:i], ' ') + 1
	return label[:start] + label[i+1:]
}

// TestCorePeerCores reads each peer core with nothing but the core and
// checks the main thread's innermost frames against expected.json: base
// label, path (a suffix) and line. expected.json's lines are another
// profiler's: the line of the instruction the frame's pc points at, which
// is the next one; rbscope reports the line of the instruction being
// executed, as Ruby's own caller_locations does (checked against the 3.3
// core's program, whose source is known: `sleep($sleep_time)` is line 9,
// expected.json says 10). So a line may be up to a few lines less than the
// expected one, never more. A core whose Ruby family has no built-in table
// must fail with one line naming the family (Ruby 3.0 has none); it is
// skipped, except 3.0, whose error is the test.
func TestCorePeerCores(t *testing.T) {
	src := testruby.EnvOr("RBSCOPE_PEER_CORES", "/work/shared/peer-cores")
	b, err := os.ReadFile(filepath.Join(src, "expected.json"))
	if err != nil {
		t.Skipf("no peer cores: %v", err)
	}
	var exp peerExpected
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatalf("expected.json: %v", err)
	}
	if len(exp.Cores) == 0 {
		t.Fatal("expected.json lists no cores")
	}
	for name, want := range exp.Cores {
		t.Run(want.Ruby, func(t *testing.T) {
			core := testruby.UnpackCore(t, filepath.Join(src, name), filepath.Join(testruby.CoreCache(), "peer-cores"))
			_, vm, err := openCoreOnly(t, core)
			fam := familyOf(want.Ruby)
			if layouts.For(fam) == nil {
				expectUnsupported(t, err, fam)
				if err != nil && !strings.Contains(err.Error(), "its file's name says Ruby "+want.Ruby+" (") {
					t.Errorf("the refusal does not name the release the file's name says, %s: %v", want.Ruby, err)
				}
				if fam != "3.0" {
					t.Skipf("no built-in table for Ruby %s: %v", fam, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Ruby %s, which has a table: %v", want.Ruby, err)
			}
			if vm.Version != want.Ruby {
				t.Errorf("version %q, want %q", vm.Version, want.Ruby)
			}
			if vm.VersionFrom == "" || strings.Contains(vm.VersionFrom, "force-version") {
				t.Errorf("version %s from %q: neither the image's strings nor its heap", vm.Version, vm.VersionFrom)
			}
			if want.VMAddr != nil && fmt.Sprintf("%#x", vm.VMPtrAddr()) != *want.VMAddr {
				t.Errorf("ruby_current_vm_ptr at %#x, expected.json says %s", vm.VMPtrAddr(), *want.VMAddr)
			}
			threads, err := vm.Threads()
			if err != nil {
				t.Fatal(err)
			}
			var main *rubyvm.Thread
			for i := range threads {
				if threads[i].Main {
					main = &threads[i]
				}
			}
			if main == nil {
				t.Fatalf("no main thread among %d", len(threads))
			}
			if len(main.Frames) < len(want.Frames) {
				t.Fatalf("main thread: %d frames, want at least %d: %s (%s)", len(main.Frames), len(want.Frames), fmtFrames(main.Frames), main.Error)
			}
			gi := 0
			for i, w := range want.Frames {
				if gi >= len(main.Frames) {
					t.Fatalf("main thread: %d frames: %s", len(main.Frames), fmtFrames(main.Frames))
				}
				g := main.Frames[gi]
				gi++
				label, _ := w[0].(string)
				path, _ := w[1].(string)
				line, _ := w[2].(float64)
				// expected.json's 4.0 stack leaves out the block that
				// `loop do ... end` runs, which Ruby's own backtraces
				// show between the method it calls and Kernel#loop.
				if strings.HasPrefix(g.Label, "block in ") && !strings.HasPrefix(label, "block in ") &&
					gi < len(main.Frames) && baseLabel(main.Frames[gi].Label) == baseLabel(label) {
					t.Logf("frame %d: rbscope has %s (%s:%d), which expected.json leaves out", i, g.Label, g.Path, g.Line)
					g = main.Frames[gi]
					gi++
				}
				if baseLabel(g.Label) != baseLabel(label) {
					t.Errorf("frame %d: label %q, want %q", i, g.Label, label)
				}
				if path == "" {
					if g.Kind != rubyvm.KindCFunc {
						t.Errorf("frame %d (%s): kind %s, want a C method", i, g.Label, g.Kind)
					}
					continue
				}
				if g.Path != path && !strings.HasSuffix(g.Path, "/"+path) {
					t.Errorf("frame %d (%s): path %q, want %q", i, g.Label, g.Path, path)
				}
				if d := int(line) - g.Line; d < 0 || d > 5 {
					t.Errorf("frame %d (%s): line %d, want %d (or up to 5 less)", i, g.Label, g.Line, int(line))
				} else if d != 0 {
					t.Logf("frame %d (%s): line %d, expected.json %d (the next instruction's)", i, g.Label, g.Line, int(line))
				}
			}
			checkPeerHeap(t, vm)
		})
	}
}

// checkPeerHeap dumps a peer core's heap: every object the census counts
// is written, and every OBJECT's instance variables are decoded (Ruby 4.0
// turned ROBJECT_EMBED into ROBJECT_HEAP and moved the shape tree into a
// global of its own). Objects whose memory the core lacks (a String whose
// bytes are in a library not on this machine) may be partial.
func checkPeerHeap(t *testing.T, vm *rubyvm.VM) {
	t.Helper()
	c, err := vm.HeapCensus()
	if err != nil {
		t.Fatalf("heap census: %v", err)
	}
	var out bytes.Buffer
	st, err := heapdump.Write(vm, &out, heapdump.Options{})
	if err != nil {
		t.Fatalf("heap dump: %v", err)
	}
	if st.Objects != c.Objects {
		t.Errorf("heap dump wrote %d objects, the census counts %d", st.Objects, c.Objects)
	}
	if st.Panicked > 0 {
		t.Errorf("%d decoders panicked: %v", st.Panicked, st.Partial)
	}
	if vm.Layout.ShapeSize > 0 && st.Shapes == 0 {
		// A core without its libruby and without the code that loads
		// the shape tree: an OBJECT's ivars cannot be counted.
		t.Logf("heap: %d objects; no shape tree found in the core; %v", st.Objects, st.Caveats())
		return
	}
	objects, withIvars := 0, 0
	for _, line := range bytes.Split(out.Bytes(), []byte("\n")) {
		if !bytes.Contains(line, []byte(`"type":"OBJECT"`)) {
			continue
		}
		objects++
		if bytes.Contains(line, []byte(`"partial"`)) {
			t.Errorf("an OBJECT written partially: %s", line)
		}
		if bytes.Contains(line, []byte(`"ivars":`)) && !bytes.Contains(line, []byte(`"ivars":0`)) {
			withIvars++
		}
	}
	if objects == 0 || withIvars == 0 {
		t.Errorf("%d OBJECTs, %d with instance variables", objects, withIvars)
	}
	t.Logf("heap: %d objects (%d OBJECTs, %d with ivars), %d shapes, %d roots; %v", st.Objects, objects, withIvars, st.Shapes, st.Roots, st.Caveats())
}

// TestCoreStoredWorkloads reads the cores scripts/gcore-workloads.sh
// stored of our own test programs, with nothing but the core, and compares
// every thread with the program's own report (as TestCoreStacksMatchCaller
// Locations does with a core taken during the test): checkCoreOnly.
func TestCoreStoredWorkloads(t *testing.T) {
	dir := testruby.EnvOr("RBSCOPE_CORES", filepath.Join(testruby.CoreCache(), "cores"))
	var stored []string
	for _, ext := range []string{"*.core.zst", "*.core.gz"} {
		m, _ := filepath.Glob(filepath.Join(dir, ext))
		stored = append(stored, m...)
	}
	if len(stored) == 0 {
		t.Skipf("no stored cores in %s (scripts/gcore-workloads.sh makes them)", dir)
	}
	for _, src := range stored {
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(src), ".zst"), ".gz")
		name = strings.TrimSuffix(name, ".core")
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, name+".json"))
			if err != nil {
				t.Skipf("no report beside the core: %v", err)
			}
			var rep selfReport
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatalf("%s.json: %v", name, err)
			}
			checkCoreOnly(t, testruby.UnpackCore(t, src, filepath.Join(dir, "unpacked")), &rep)
		})
	}
}

// checkCoreOnly reads a core of stack_threads.rb with nothing but the core
// and compares every thread with the program's report rep (which it may
// edit). A thread that was running when the core was taken may have been
// caught between two lines; that is logged, as a stored core cannot be
// taken again. A core of a Ruby family without a built-in table must fail
// in one line naming it, and the test is skipped.
func checkCoreOnly(t *testing.T, core string, rep *selfReport) {
	t.Helper()
	c, vm, err := openCoreOnly(t, core)
	if fam := familyOf(rep.Version); layouts.For(fam) == nil {
		expectUnsupported(t, err, fam)
		t.Skipf("no built-in table for Ruby %s: %v", fam, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c.PID() != rep.PID {
		t.Errorf("core pid %d, the program's %d", c.PID(), rep.PID)
	}
	// A core that holds no read-only data (a kernel core) has its
	// release proven from its heap: the exact release, never a family.
	if vm.Version != rep.Version {
		t.Errorf("version %q (%s), the program's %q", vm.Version, vm.VersionFrom, rep.Version)
	}
	threads, err := vm.Threads()
	if err != nil {
		t.Fatal(err)
	}
	if !runningAgree(rep, threads) {
		t.Logf("a running thread was caught between two lines; its stack is not compared")
		running := map[int]bool{}
		for i := range threads {
			if threads[i].Status == "run" {
				running[threads[i].TID] = true
				threads[i].Frames = nil
			}
		}
		for i := range rep.Threads {
			if running[rep.Threads[i].TID] {
				rep.Threads[i].Top, rep.Threads[i].Frames = nil, nil
			}
		}
	}
	// What the core lacks is a path that is a literal in the
	// image's read-only data (3.1's "(eval)"): such a frame is
	// compared without its path.
	for _, th := range threads {
		for i, f := range th.Frames {
			if f.Path != rubyvm.PathNotInCore {
				continue
			}
			t.Logf("thread %q frame %d (%s): path not in the core", th.Name, i, f.Label)
			for j := range rep.Threads {
				if rep.Threads[j].TID != th.TID {
					continue
				}
				if k := i - len(rep.Threads[j].Top); k >= 0 && k < len(rep.Threads[j].Frames) {
					rep.Threads[j].Frames[k][1] = rubyvm.PathNotInCore
				}
			}
		}
	}
	checkStacks(t, testruby.Ruby{Name: "core-only", Stripped: true}, rep, vm, threads, false) // read with nothing but the core: the built-in table
}
